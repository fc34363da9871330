"""What the configuration desires of resctrl, as allocator requests (no I/O).

The configured pools against the platform (:func:`pool_requests`: masks
and ways that need the platform to check; the checks that need none are
made at load, :func:`ovs_rdt.conf.check_pool`), the dynamic policy's split
(:func:`policy_bounds`, :func:`hp_be_split`), the default group's floor and
masks (:func:`system_min_ways`, :func:`system_masks`), and the groups of
ours kept as they are (:func:`held_ways`, :func:`existing_request`,
:func:`desired`, :func:`held_pools`).
"""
from __future__ import annotations

from ovs_rdt.core import allocator
from ovs_rdt.core.bitmask import CBM
from ovs_rdt.core.kernel import is_valid
from ovs_rdt.core.model import MODE_EXCLUSIVE, Group, Platform, Request
from ovs_rdt.core.model import MBInfo, ROOT, UNIT_MBPS, UNIT_PERCENT
from ovs_rdt.core.model import held_masks, mb_terms, pool_group, uncapped_mb
from ovs_rdt.exceptions import ConfigError, InvalidMask, InvalidValue, refuse
from ovs_rdt.inputs import request
from ovs_rdt import POOL_GROUP_PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:  # the hook imports this: keep typing out of it
    from typing import Any

    from ovs_rdt.conf import PoolSection, Settings
    from ovs_rdt.core.policy import Bounds


def parse_domain_masks(text: str, platform: Platform,
                       field: str) -> dict[int, CBM]:
    """``7f0`` (every domain) or ``0=7f0;1=3f`` (per domain).

    Checked against the platform; ConfigError names ``field``.
    """
    # (Here: a node with no configured masks, and so every hook event
    # there, imports two modules less.)
    from ovs_rdt.inputs import masks
    try:
        values = masks.domain_masks(text, field, platform.domains,
                                    platform.cbm_len)
        out = {dom: CBM(value, platform.cbm_len)
               for dom, value in values.items()}
        for mask in out.values():
            allocator.validate_mask(platform, mask, field)
    except (InvalidMask, InvalidValue) as exc:
        raise ConfigError(str(exc)) from None
    return out


def hp_be_split(hp: Request, be: Request, hp_ways: dict[int, int],
                budget: int, be_mb: dict[int, int]) -> dict[str, Request]:
    """The dynamic policy's two pools as one split: the high-priority pool
    ``hp_ways`` per domain, the best-effort pool the rest of ``budget`` and
    the MB percent ``be_mb`` per domain; each keeps its configured caps,
    isolation and event.
    """
    return {hp.name: Request(hp.name, ways=dict(hp_ways),
                             exclusive=hp.exclusive,
                             mb_percent=hp.mb_percent, mb_mbps=hp.mb_mbps,
                             mb_event=hp.mb_event),
            be.name: Request(be.name, ways={d: budget - n
                                            for d, n in hp_ways.items()},
                             exclusive=be.exclusive,
                             mb_percent=be.mb_percent, mb=be_mb,
                             mb_mbps=be.mb_mbps, mb_event=be.mb_event)}


def _shape(req: Request) -> str:
    """A pool's size in words: ways per domain, or masks."""
    if req.ways:
        return 'ways %s' % ','.join('%d=%d' % kv for kv in sorted(
            req.ways.items()))
    return 'L3:%s' % ';'.join('%d=%s' % kv for kv in sorted(req.cbm.items()))


def pool_requests(settings: Settings, platform: Platform,
                  groups: list[Group] | None = None,
                  split: dict[str, Request] | None = None) -> list[Request]:
    """One request per configured pool; ConfigError names the option.

    With ``[policy] enabled``, the two policy pools keep the split they
    hold now (``groups``), so that a VM start or ``apply`` never undoes
    the agent's last decision; ``split`` is a new one (the agent's).
    """
    out = configured_pools(settings, platform)
    held = _held_split(settings, platform, groups or [], out)
    held.update(split or {})
    if held:
        out = [held.get(r.name, r) for r in out]
        # The high-priority pool first: it packs just below the
        # system's ways, the best-effort pool below it (the policy
        # white paper's Table 6).
        order = [r.name for r in held.values()]
        out.sort(key=lambda r: order.index(r.name) if r.name in order
                 else -1)
    return out


def policy_bounds(settings: Settings) -> Bounds | None:
    """``[policy]`` checked (None when off); ConfigError if bad."""
    if not settings.policy.enabled:
        return None     # the hook's case: no import of the policy (8 ms)
    from ovs_rdt.core.policy import bounds_from
    return bounds_from(settings)


def _held_split(settings: Settings, platform: Platform, groups: list[Group],
                requests: list[Request]) -> dict[str, Request]:
    """The policy pools' requests as they hold now, where valid."""
    bounds = policy_bounds(settings)
    if bounds is None:
        return {}
    by_name = {r.name: r for r in requests}
    hp_name = pool_group(bounds.high_priority)
    be_name = pool_group(bounds.best_effort)
    hp, be = by_name[hp_name], by_name[be_name]
    current = {g.name: g for g in groups}
    root = current.get('')
    ways = dict(hp.ways)
    mb: dict[int, int] = {}
    if hp_name in current and be_name in current and root is not None:
        now_hp = held_ways(current[hp_name], root)
        now_be = held_ways(current[be_name], root)
        for dom, count in now_hp.items():
            if bounds.hp_min <= count <= bounds.hp_max and \
                    now_be.get(dom) == bounds.budget - count:
                ways[dom] = count
        ceiling = be.mb_percent or 100
        if platform.mb is not None and \
                platform.mb.unit == UNIT_PERCENT:
            mb = {d: v for d, v in current[be_name].mb.items()
                  if v < ceiling}
    return hp_be_split(hp, be, ways, bounds.budget, mb)


def configured_pools(settings: Settings, platform: Platform
                     ) -> list[Request]:
    """Each ``[pool:X]`` as the files size it, checked against the
    platform (the checks that need none were made at load).
    """
    out = []
    for name, pool in settings.pools.items():
        section = '[pool:%s]' % name
        size: dict[str, Any]
        if pool.l3_code_cbm or pool.l3_data_cbm:
            code, data = _split_masks(section, pool, platform)
            size = {'cbm': {d: code[d] | data[d] for d in code},
                    'code': code, 'data': data}
        elif pool.l3_cbm:
            size = {'cbm': parse_domain_masks(pool.l3_cbm, platform,
                                              '%s l3_cbm' % section)}
        else:
            assert pool.l3_ways is not None     # (conf.check_pool)
            if pool.l3_ways > platform.cbm_len:
                raise ConfigError('%s l3_ways = %d is more than the %d '
                                  'ways of this platform'
                                  % (section, pool.l3_ways,
                                     platform.cbm_len))
            size = {'ways': {d: pool.l3_ways for d in platform.domains}}
        _check_pool_mb(section, pool, platform)
        out.append(Request(pool_group(name), exclusive=pool.isolated,
                           mb_percent=pool.mb_percent, mb_mbps=pool.mb_mbps,
                           mb_event=pool.mb_event, **size))
    return out


def _split_masks(section: str, pool: PoolSection, platform: Platform
                 ) -> tuple[dict[int, CBM], dict[int, CBM]]:
    """``l3_code_cbm`` and ``l3_data_cbm`` (both given: checked at load):
    CDP only, the two together one run of ways on every domain.
    """
    if not platform.cdp:
        field = 'l3_code_cbm' if pool.l3_code_cbm else 'l3_data_cbm'
        raise refuse('%s %s' % (section, field), getattr(pool, field),
                     'needs resctrl mounted with -o cdp (this host has '
                     'one L3 mask per group: use l3_cbm)', ConfigError)
    assert pool.l3_code_cbm and pool.l3_data_cbm    # (conf.check_pool)
    code = parse_domain_masks(pool.l3_code_cbm, platform,
                              '%s l3_code_cbm' % section)
    data = parse_domain_masks(pool.l3_data_cbm, platform,
                              '%s l3_data_cbm' % section)
    odd = sorted(set(code) ^ set(data))
    if odd:
        raise ConfigError('%s l3_code_cbm and l3_data_cbm must name the '
                          'same cache domains (domain %d is in one only)'
                          % (section, odd[0]))
    for dom in sorted(code):
        both = code[dom] | data[dom]
        if not is_valid(platform, both):
            raise ConfigError(
                '%s l3_code_cbm %s and l3_data_cbm %s on domain %d '
                'together are not one run of ways (%s): the pool holds '
                'the ways either uses' % (section, code[dom], data[dom],
                                          dom, both))
    return code, data


def _check_pool_mb(section: str, pool: PoolSection,
                   platform: Platform) -> None:
    """A pool's cap against the platform's MB unit, by the one rule
    (a VM's: refused without MBA too); one cap of two kinds is refused
    at load.
    """
    labels = {f: '%s %s' % (section, f) for f in request.MB_FIELDS}
    mba = platform.mb
    if pool.mb_event is not None:
        try:
            request.check_mb_event(
                pool.mb_event, '%s mb_event' % section,
                mba is not None and mba.unit == UNIT_MBPS,
                mba.kind if mba is not None else '',
                platform.mon_features,
                mba is not None and mba.event_file)
        except InvalidValue as exc:
            raise ConfigError(str(exc)) from None
    for field in request.MB_FIELDS:
        value = getattr(pool, field)
        if value is None:
            continue
        try:
            request.check_mb(field, value, labels[field],
                             *mb_terms(mba), labels)
        except InvalidValue as exc:
            raise ConfigError(str(exc)) from None


def system_min_ways(settings: Settings, platform: Platform) -> int:
    """``[allocation] system_min_ways``, checked against the platform
    (ConfigError: more ways than a cache domain has).
    """
    ways = settings.allocation.system_min_ways
    if ways > platform.cbm_len:
        raise ConfigError('[allocation] system_min_ways = %d is more than '
                          'the %d ways of this platform\'s cache domains: '
                          'the default group cannot keep them'
                          % (ways, platform.cbm_len))
    return ways


def system_masks(settings: Settings, platform: Platform
                 ) -> dict[int, CBM] | None:
    """``[allocation] system_l3_cbm`` against the platform (None: unset)."""
    raw = settings.allocation.system_l3_cbm
    if not raw:
        return None
    return parse_domain_masks(raw, platform, '[allocation] system_l3_cbm')


def held_ways(group: Group, root: Group) -> dict[int, int]:
    """Ways a group of ours holds per domain
    (:func:`ovs_rdt.core.model.held_masks`; see existing_request).
    """
    return {d: m.count for d, m in held_masks(group, root).items()}


def existing_request(group: Group, root: Group,
                     mba: MBInfo | None = None) -> Request:
    """What an existing group of ours holds, to keep it as it is.

    A domain where its mask does not overlap the default group's is one
    it holds ways on; elsewhere it follows the default group.  The
    allocator's write order keeps this true after every single write,
    so it also holds after a crash half-way through a plan.  It cannot
    tell a group's ways from the default group's if another tool
    rewrote the default group over them (e.g. ``pqos -R``).
    """
    ways = held_ways(group, root)
    top = uncapped_mb(mba)
    mb = [v for v in group.mb.values() if v < top]
    # The cap it has, in the platform's kind of value.
    pct = mbps = None
    if mb and (mba is None or mba.unit == UNIT_PERCENT):
        pct = min(mb)
    elif mb and mba is not None:
        mbps = mba.mbps_of(min(mb)) or 1
    if group.name.startswith(POOL_GROUP_PREFIX):
        # A pool no longer configured: keep its masks until "apply".
        return Request(group.name, cbm=held_masks(group, root),
                       exclusive=group.mode == MODE_EXCLUSIVE,
                       mb_percent=pct, mb_mbps=mbps)
    return Request(group.name, ways=ways, exclusive=True,
                   mb_percent=pct, mb_mbps=mbps)


def desired(settings: Settings, platform: Platform, groups: list[Group],
            applying: bool = False, split: dict[str, Request] | None = None
            ) -> tuple[list[Request], list[str]]:
    """Every group of ours as a plan should leave it, and the pools it
    keeps as they are though the files size them otherwise (words).

    Only ``apply`` (``applying``: the command, and the agent at its
    start, its SIGHUP and its repair) makes the pools what the files
    say and removes those no longer configured.  Every other plan (a
    VM start or stop, the agent placing PMD threads or a guest) keeps
    a pool that exists as resctrl holds it (:func:`held_pools`) and
    creates only a configured one that does not: editing the files
    moves nothing until they are applied.
    """
    requests = pool_requests(settings, platform, groups, split)
    kept: list[str] = []
    if not applying:
        requests, kept = held_pools(settings, platform, groups, requests)
    configured = {r.name for r in requests}
    root = next(g for g in groups if g.is_root)
    for grp in groups:
        if not grp.owned or grp.name in configured:
            continue
        if grp.name.startswith(POOL_GROUP_PREFIX) and applying:
            continue
        requests.append(existing_request(grp, root, platform.mb))
    return requests, kept


def held_pools(settings: Settings, platform: Platform, groups: list[Group],
               requests: list[Request]) -> tuple[list[Request], list[str]]:
    """``requests`` (the configured pools) with each pool that holds
    ways of its own as resctrl holds it: its ways (still moved to make
    room, when the files size it by ways) or masks, mode and MB cap.
    The dynamic policy's two pools keep their split already
    (:func:`pool_requests`).  Also, in words, each pool whose ways the
    files set otherwise.
    """
    bounds = policy_bounds(settings)
    policy = set() if bounds is None else {
        pool_group(bounds.high_priority), pool_group(bounds.best_effort)}
    current = {g.name: g for g in groups}
    root = current[ROOT]
    out, kept = [], []
    for req in requests:
        grp = current.get(req.name)
        held = None if grp is None or req.name in policy else \
            existing_request(grp, root, platform.mb)
        if grp is None or held is None or not held.cbm:
            out.append(req)     # (none yet: made as the files say)
            continue
        if req.ways:
            held.ways, held.cbm = held_ways(grp, root), {}
        elif req.code:
            held.code = {d: grp.l3code[d] for d in held.cbm}
            held.data = {d: grp.l3data[d] for d in held.cbm}
        if (held.ways, held.cbm) != (req.ways, req.cbm):
            kept.append('%s kept as it is (%s), though the files ask %s: '
                        'pools change at "ovs-rdt apply" (with an agent '
                        'running: at its reload)'
                        % (req.name, _shape(held), _shape(req)))
        out.append(held)
    return out, kept
