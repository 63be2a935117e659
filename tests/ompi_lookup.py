"""A Python model of how Open MPI looks up a rule in a parsed rules file, for the tests that
predict which algorithm a call runs (the product only writes and checks files)."""

from tunedmpi.tables.rulesfile import message_size


def select(parsed, collective, comm_size, imb_bytes):
    """The rule Open MPI uses for a call (Python twin of coll_tuned_dynamic_rules.c:289-391), or
    None when it keeps its fixed decision (no rules, or algorithm 0)."""
    entries = parsed.collectives.get(collective)
    if not entries:
        return None
    best = entries[0]
    for entry in entries:
        if entry.comm_size > comm_size:
            break
        best = entry
    msg = message_size(collective, imb_bytes, comm_size)
    chosen = None
    for rule in best.rules:
        if rule.msgsize > msg:
            break
        chosen = rule
    if chosen is None:
        chosen = best.rules[0]
    return chosen if chosen.algorithm else None
