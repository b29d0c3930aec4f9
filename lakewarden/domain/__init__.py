"""Pure rules over plain values: file classes, evaluation, planning, scheduling, state machines, maintenance,
retention, failure classes, security, errors. No I/O."""
