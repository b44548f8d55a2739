-- start: start_reserved (start.lib) on its own, for a task reserved by reserve.lua or by
-- blueque 1.0 (its Processor.start).
--#include common.lib
--#include admin.lib
--#include depends.lib
--#include start.lib
return start_reserved(KEYS, ARGV)
