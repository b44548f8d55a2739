"""The soak's last word: the figures, what each must be, the first findings of each kind, and
the same as JSON (``--json``) for a test or a note."""

import json


def report(args, soak, tasks, planned, verdict, released):
    unexpected = [(p.name, *exit_) for p in soak.supervised for exit_ in p.unexpected]
    checks = {
        "live listeners released": len(released),
        "lost": len(verdict.lost), "stuck": len(verdict.stuck),
        "run to the end twice": len(verdict.run_twice), "cut short": len(verdict.cut_short),
        "out of order": len(verdict.out_of_order), "over a limit": len(verdict.over_limit),
        "unexpected exits": len(unexpected), "never recovered": len(verdict.never_recovered),
        "not enqueued": planned - len(tasks), "harness errors": len(soak.harness_errors)}
    slow = verdict.longest_recovery > args.max_recovery
    times = [(seconds, task_id) for seconds, task_id in verdict.recoveries if seconds is not None]
    slowest = f" (the longest: {max(times)[1]})" if times else ""
    rows = [
        ("enqueued", verdict.enqueued, f"of {planned} planned"),
        ("completed", verdict.completed, ""),
        ("failed by design", verdict.failed_by_design, ""),
        ("spent by the faults", len(verdict.spent_by_faults),
         "not a check: failed after the soak's faults and designed failures used every attempt"),
        ("lost", len(verdict.lost), "must be 0"),
        ("stuck", len(verdict.stuck), "must be 0"),
        ("run to the end twice", len(verdict.run_twice),
         f"must be 0 ({len(soak.killed)} task(s) whose process the soak killed, "
         f"{len(soak.abandoned)} left holding their GIL by a listener it stopped, not counted)"),
        ("out of order", len(verdict.out_of_order),
         "must be 0: a workflow step started before a step it waits for ended"),
        ("over a limit", len(verdict.over_limit),
         "must be 0: a queue (MAX_RUNNING) or a key (MAX_RUNNING_PER_KEY) ran more at once"),
        ("limits reached", f"{sum(most == limit for most, limit in verdict.limit_peaks.values())}"
                           f"/{len(verdict.limit_peaks)}",
         "not a check: limits whose tasks ran as many at once as allowed (" + ", ".join(
             f"{what} {most}/{limit}" for what, (most, limit) in verdict.limit_peaks.items())
         + ")"),
        ("cut short", len(verdict.cut_short),
         "must be 0: runs stopped before their end, not killed (nor left) by the soak"),
        ("unexpected exits", len(unexpected), "must be 0: listener/scheduler/reaper exits "
                                              "nobody asked for"),
        ("live listeners released", len(released),
         "must be 0: the reaper released a listener that was alive and not stopped"),
        ("longest recovery", f"{verdict.longest_recovery:.1f} s",
         f"must be <= {args.max_recovery:g} s: from a fault to its task given back (retried "
         f"or failed), over {len(verdict.recoveries)} task(s) taken from a process{slowest} "
         "(Redis outages not counted; "
         f"{len(verdict.limited_recoveries)} of limited queues, whose next start waits for "
         "their limit, not counted)"),
        ("never recovered", len(verdict.never_recovered), "must be 0"),
        ("attempts without a run", len(verdict.attempts_without_run),
         "not a check: attempts counted by the engine whose code never started"),
        ("refused to start", sum(p.refused for p in soak.supervised),
         "not a check: restarts while Redis was away"),
    ]
    print()
    for name, value, note in rows:
        print(f"{name:<24}{value!s:>10}   {note}")
    for title, items in (("lost", verdict.lost), ("spent", verdict.spent_by_faults),
                         ("stuck", verdict.stuck),
                         ("run twice", verdict.run_twice), ("cut short", verdict.cut_short),
                         ("out of order", verdict.out_of_order),
                         ("over a limit", verdict.over_limit),
                         ("never recovered", verdict.never_recovered),
                         ("unexpected exit", unexpected), ("live listener released", released),
                         ("harness error", soak.harness_errors)):
        for item in items[:10]:
            print(f"  {title}: {item}")
        if len(items) > 10:
            print(f"  ... and {len(items) - 10} more {title}")
    failed = {name: n for name, n in checks.items() if n}
    if slow:
        failed["recovery over the bound"] = 1
    print(f"\nsoak seed {args.seed}: " + ("PASS" if not failed else "FAIL (" + ", ".join(
        f"{name} {n}" for name, n in failed.items()) + ")"))
    figures = {
        "seed": args.seed, "short": args.short, "sentinel": args.sentinel,
        "planned": planned, "enqueued": verdict.enqueued, "completed": verdict.completed,
        "failed_by_design": verdict.failed_by_design,
        "spent_by_faults": verdict.spent_by_faults, "lost": verdict.lost,
        "stuck": verdict.stuck, "run_twice": verdict.run_twice,
        "cut_short": verdict.cut_short, "out_of_order": verdict.out_of_order,
        "over_limit": verdict.over_limit, "limit_peaks": verdict.limit_peaks,
        "unexpected_exits": unexpected,
        "live_listeners_released": released,
        "longest_recovery": verdict.longest_recovery, "recoveries": verdict.recoveries,
        "never_recovered": verdict.never_recovered,
        "attempts_without_run": verdict.attempts_without_run,
        "killed_by_soak": sorted(soak.killed), "outages": soak.outages,
        "faults": soak.fault_log, "harness_errors": soak.harness_errors,
        "sabotaged": soak.sabotaged, "passed": not failed, "workdir": str(soak.workdir)}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=list))
    return not failed
