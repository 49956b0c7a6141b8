"""A Go program's command line read as Go's ``flag`` package reads it, and a feature-gate value as Kubernetes'
``featuregate`` package reads it: the KubeRay operator parses both (``ray-operator/main.go``: ``flag.Parse()`` on the
standard library's ``flag.CommandLine``, then ``utilfeature.DefaultMutableFeatureGate.Set(featureGates)``).

Go's rules (https://pkg.go.dev/flag, "Command line flag syntax"; ``FlagSet.parseOne`` in golang/go
``src/flag/flag.go``): ``-flag`` and ``--flag`` alike; ``-flag=value``; ``-flag value`` for a non-boolean flag
only (the next argument, whatever it looks like); parsing stops before the first non-flag argument (``-`` alone is
one) and just after the terminator ``--``; a flag given twice keeps its last value. ``flag.Parse`` exits the
program (``ExitOnError``) on an undefined flag, ``---x`` or ``-=x``, a non-boolean flag with no value left, or a
boolean value ``strconv.ParseBool`` refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["GO_BOOLS", "ExitsError", "parse_feature_gates", "parse_go_flags"]

GO_BOOLS: Mapping[str, bool] = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}
"""Exactly what Go's ``strconv.ParseBool`` takes (golang/go ``src/strconv/atob.go``): ``tRUE`` is refused."""

_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
"""What Go's ``strings.TrimSpace`` trims (``unicode.IsSpace``: Unicode's White_Space), which Python's ``str.strip``
does not quite match (it also strips U+001C to U+001F)."""


class ExitsError(ValueError):
    """The program exits on these arguments; the message is what Go says."""


def parse_go_flags(args: Sequence[str], flags: Mapping[str, bool]) -> dict[str, str]:
    """The value each flag of ``flags`` (name -> whether it is boolean) takes from ``args`` (the program's arguments,
    its own name left out): the last one given; a bare boolean flag is ``"true"``. Raises :class:`ExitsError`."""
    values: dict[str, str] = {}
    rest = list(args)
    while rest:
        arg = rest[0]
        if len(arg) < 2 or arg[0] != "-":
            break  # the first non-flag argument
        dashes = 2 if arg[1] == "-" else 1
        if arg == "--":
            break  # the terminator
        name = arg[dashes:]
        if name[0] in "-=":
            raise ExitsError(f"bad flag syntax: {arg}")
        rest.pop(0)
        name, has_value, value = name.partition("=")
        if name not in flags:
            raise ExitsError(
                "-help or -h: flag.Parse prints the usage and exits"
                if name in ("help", "h")
                else f"flag provided but not defined: -{name}"
            )
        if flags[name]:
            if has_value and value not in GO_BOOLS:
                raise ExitsError(f'invalid boolean value "{value}" for -{name}')
            values[name] = value if has_value else "true"
            continue
        if not has_value:
            if not rest:
                raise ExitsError(f"flag needs an argument: -{name}")
            value = rest.pop(0)
        values[name] = value
    return values


def parse_feature_gates(value: str) -> dict[str, str]:
    """A ``--feature-gates`` value as component-base ``featuregate``'s ``Set`` reads it (kubernetes/component-base
    ``featuregate/feature_gate.go``, v0.36.0, what KubeRay v1.7.0 builds with): comma-separated ``key=bool``, empty
    items skipped, key and value trimmed, a key given twice keeps the last. Each value is as given, one of
    :data:`GO_BOOLS`. Raises :class:`ExitsError` (KubeRay exits: "Unable to set flag gates for known features")."""
    gates: dict[str, str] = {}
    for item in value.split(","):
        if not item:
            continue
        key, has_value, said = item.partition("=")
        key = key.strip(_GO_SPACE)
        if not has_value:
            raise ExitsError(f"missing bool value for {key}")
        said = said.strip(_GO_SPACE)
        if said not in GO_BOOLS:
            raise ExitsError(f"invalid value of {key}={said}")
        gates[key] = said
    return gates
