"""Collectives that XLA:CPU may run at once on one device, read from a compiled program's HLO
(`compiled.as_text()`): a conditional, while or call whose computations hold a collective,
followed in its computation's schedule by another instruction holding one that does not
depend on it by data. XLA:CPU orders a program's collectives only by when they start; such a
conditional still running lets the next start, each blocking a thread of a pool that emulated
devices share (docs/guide/split_model.md, "Emulated devices")."""

import re

COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-permute")
NESTED = ("conditional", "while", "call")
_CALLED = re.compile(r"(?:branch_computations=\{([^}]*)\}|(?:true_computation|false_computation"
                     r"|condition|body|to_apply)=%?([\w.\-]+))")  # fmt: skip


def _computations(text: str) -> dict[str, list[dict]]:
    """Each computation's instructions in schedule order: name, opcode, operands, callees."""
    found: dict[str, list[dict]] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if head:
            current = found.setdefault(head.group(1), [])
            continue
        parsed = re.match(r"\s+(?:ROOT )?%?([\w.\-]+) = \S+(?: \S+)*? ([a-z\-]+)\((.*)$", line)
        if current is None or not parsed:
            continue
        name, opcode, rest = parsed.groups()
        depth, end = 1, len(rest)
        for at, char in enumerate(rest):  # the operands end at the matching parenthesis
            depth += (char == "(") - (char == ")")
            if depth == 0:
                end = at
                break
        callees = [
            callee.strip().lstrip("%")
            for group in _CALLED.findall(rest[end:])
            for callee in ",".join(group).split(",")
            if callee.strip()
        ]
        operands = re.findall(r"%([\w.\-]+)", rest[:end])
        current.append(dict(name=name, opcode=opcode, operands=operands, callees=callees))
    return found


def overlaps(text: str) -> list[str]:
    """'computation: nested -> later' for each pair of a program's HLO `text` that may be in
    flight at once on a device of XLA:CPU (empty: one collective at a time)."""
    computations = _computations(text)
    holds: dict[str, bool] = {}

    def computation_holds(name: str) -> bool:
        if name not in holds:
            holds[name] = False  # a cycle (none in HLO) reads as none
            holds[name] = any(holding(i) for i in computations.get(name, []))
        return holds[name]

    def holding(instruction: dict) -> bool:
        if instruction["opcode"].removesuffix("-start") in COLLECTIVES:
            return True
        return instruction["opcode"] in NESTED and any(
            computation_holds(c) for c in instruction["callees"]
        )

    found = []
    for name, instructions in computations.items():
        needs: dict[str, set[str]] = {}
        for instruction in instructions:
            needed = set(instruction["operands"])
            for operand in instruction["operands"]:
                needed |= needs.get(operand, set())
            needs[instruction["name"]] = needed
        for at, nested in enumerate(instructions):
            if nested["opcode"] not in NESTED or not holding(nested):
                continue
            found += [
                f"{name}: {nested['name']} -> {later['name']}"
                for later in instructions[at + 1 :]
                if holding(later) and nested["name"] not in needs[later["name"]]
            ]
    return found
