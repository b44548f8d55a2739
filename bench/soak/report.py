"""The soak's last word: the figures, what each must be, the first findings of each kind, and
the same as JSON (``--json``) for a test or a note."""

import json


def report(args, soak, tasks, planned, verdict, released):
    unexpected = [(p.name, *exit_) for p in soak.supervised for exit_ in p.unexpected]
    checks = {
        "live listeners released": len(released),
        "lost": len(verdict.lost), "stuck": len(verdict.stuck),
        "run to the end twice": len(verdict.run_twice), "cut short": len(verdict.cut_short),
        "unexpected exits": len(unexpected), "never recovered": len(verdict.never_recovered),
        "not enqueued": planned - len(tasks), "harness errors": len(soak.harness_errors)}
    slow = verdict.longest_recovery > args.max_recovery
    rows = [
        ("enqueued", verdict.enqueued, f"of {planned} planned"),
        ("completed", verdict.completed, ""),
        ("failed by design", verdict.failed_by_design, ""),
        ("lost", len(verdict.lost), "must be 0"),
        ("stuck", len(verdict.stuck), "must be 0"),
        ("run to the end twice", len(verdict.run_twice),
         f"must be 0 ({len(soak.killed)} task(s) whose process the soak killed not counted)"),
        ("cut short", len(verdict.cut_short),
         "must be 0: runs stopped before their end, not killed by the soak"),
        ("unexpected exits", len(unexpected), "must be 0: listener/scheduler/reaper exits "
                                              "nobody asked for"),
        ("live listeners released", len(released),
         "must be 0: the reaper released a listener that was alive and not stopped"),
        ("longest recovery", f"{verdict.longest_recovery:.1f} s",
         f"must be <= {args.max_recovery:g} s, over {len(verdict.recoveries)} task(s) taken "
         "from a process (Redis outages not counted)"),
        ("never recovered", len(verdict.never_recovered), "must be 0"),
        ("attempts without a run", len(verdict.attempts_without_run),
         "not a check: attempts counted by the engine whose code never started"),
        ("refused to start", sum(p.refused for p in soak.supervised),
         "not a check: restarts while Redis was away"),
    ]
    print()
    for name, value, note in rows:
        print(f"{name:<24}{value!s:>10}   {note}")
    for title, items in (("lost", verdict.lost), ("stuck", verdict.stuck),
                         ("run twice", verdict.run_twice), ("cut short", verdict.cut_short),
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
        "failed_by_design": verdict.failed_by_design, "lost": verdict.lost,
        "stuck": verdict.stuck, "run_twice": verdict.run_twice,
        "cut_short": verdict.cut_short, "unexpected_exits": unexpected,
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
