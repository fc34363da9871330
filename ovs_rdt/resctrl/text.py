"""What the kernel prints in resctrl files, parsed (pure: no I/O).

Read as the kernel writes them, not checked as input.  Every ``D=V;D=V``
goes through :func:`domain_items` (its writer: :mod:`ovs_rdt.core.plan`).
"""
from __future__ import annotations

from ovs_rdt.core.bitmask import CBM

#: The schemata resources that hold L3 masks: ``L3``, or ``L3CODE`` and
#: ``L3DATA`` under CDP.
L3_RESOURCES = ('L3', 'L3CODE', 'L3DATA')


def domain_items(text: str) -> dict[int, str]:
    """``0=7f0;1=3f``: domain -> value text, the one reader of that form
    (schemata lines, ``size``, ``io_alloc_cbm``, ``num_mbm_cntrs``,
    ``mbm_L3_assignments``); items without a domain number are skipped.
    """
    out: dict[int, str] = {}
    for item in text.strip().split(';'):
        dom, eq, val = item.partition('=')
        if eq and dom.strip().isdigit():
            out[int(dom)] = val.strip()
    return out


def resource_lines(text: str) -> dict[str, dict[int, str]]:
    """``RES:0=v;1=v`` lines: resource -> domain -> value text (names may
    be padded, as the kernel pads them to the longest name).
    """
    out: dict[str, dict[int, str]] = {}
    for line in text.splitlines():
        res, sep, rest = line.strip().partition(':')
        if sep:
            out.setdefault(res.strip(), {}).update(domain_items(rest))
    return out


def parse_resources(text: str, width: int) -> dict[str, dict[int, CBM]]:
    """The L3 lines of a schemata file: ``{resource: {domain: mask}}``.

    ``L3``, ``L3CODE`` and ``L3DATA``; other lines (``MB``, ``SMBA``,
    ``L2``) are left out.
    """
    return {res: {d: CBM(int(v, 16), width) for d, v in values.items()}
            for res, values in resource_lines(text).items()
            if res in L3_RESOURCES}


def parse_schemata(text: str, width: int) -> tuple[dict[int, CBM],
                                                   dict[int, int]]:
    """Parse a schemata file into L3 masks and MB values per domain.

    Under CDP a domain's L3 mask is its ``L3CODE`` and ``L3DATA`` masks
    together: a way either uses is in use.  ``SMBA`` lines are not ``MB``.
    """
    res = parse_resources(text, width)
    l3: dict[int, CBM] = dict(res.get('L3', {}))
    for kind in ('L3CODE', 'L3DATA'):
        for dom, mask in res.get(kind, {}).items():
            l3[dom] = l3[dom] | mask if dom in l3 else mask
    mb = {d: int(v) for d, v in resource_lines(text).get('MB', {}).items()}
    return l3, mb


def parse_domain_values(text: str) -> dict[int, str]:
    """``0=ffff;1=ffff`` (``io_alloc_cbm``, ``num_mbm_cntrs``) per domain."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        out.update(domain_items(line))
    return out


def mount_entry(mounts_text: str, root: str) -> tuple[str, list[str]] | None:
    """``(fstype, options)`` of the last mount at ``root`` in a
    ``/proc/mounts`` text (``resctrl``; ``fuse.resctrl`` for the emulator);
    None when nothing is mounted there.
    """
    found = None
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        # Spaces and the like are octal escapes in /proc/mounts.
        where = fields[1].replace('\\040', ' ').replace('\\011', '\t')
        if where.rstrip('/') == root.rstrip('/'):
            found = (fields[2], fields[3].split(','))   # the last one wins
    return found


def parse_size(text: str, resource: str = 'L3') -> dict[int, int]:
    """The ``resource`` line of a group's ``size`` file: bytes per domain.

    Under CDP the kernel prints ``L3CODE`` and ``L3DATA`` lines there
    (one per schema, ``rdtgroup_size_show()``), no ``L3`` line.
    """
    return {d: int(v) for d, v in
            resource_lines(text).get(resource, {}).items() if v}


def active_mode(text: str | None) -> str | None:
    """The active mode of ``info/L3_MON/mbm_assign_mode`` (``[mbm_event]``)."""
    words = (text or '').split()
    for word in words:
        if word.startswith('[') and word.endswith(']'):
            return word[1:-1]
    return words[0] if words else None
