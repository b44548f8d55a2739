-- reserve: reserve_next (reserve.lib) on its own, for blueque 1.0's Listener.listen(); the
-- runner takes and starts a task in one step instead (take.lua). KEYS and ARGV are
-- reserve_next's k and a.
--#include common.lib
--#include reserve.lib
return reserve_next(KEYS, ARGV)
