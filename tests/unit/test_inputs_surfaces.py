"""Every node-side surface over the same good and bad values (tests.inputs_table).

The libvirt hook's domain reader (our annotation, the flavor extra specs
Nova copies into the XML, the ``[flavors]`` section), the agent's OvS knobs
and ovs-rdt.conf must each accept the same values as the others and refuse
the same ones with the same message, but for the field's name.  The Nova
API validators and the scheduler filter run over the same table inside real
Nova: tests/nova/test_inputs_surfaces.py.
"""
from __future__ import annotations

from typing import Callable

import pytest

from ovs_rdt.agent import knobs
from ovs_rdt import conf
from ovs_rdt.conf import Settings
from ovs_rdt import domain_xml as domain
from ovs_rdt.exceptions import ConfigError, InvalidValue
from tests.inputs_table import POOLS, ROWS, Row

UUID = '0b0580e0-4511-437a-855b-3e988e147bd5'
NOVA_NS = 'http://openstack.org/xmlns/libvirt/nova/1.1'
SETTINGS = Settings.defaults(pools={p: {'l3_ways': 1} for p in POOLS})


def xml_escaped(value: str) -> str:
    """Every character but letters and digits as a character reference.

    (Attribute values would otherwise be normalised: tabs, newlines.)
    """
    return ''.join(c if c.isascii() and c.isalnum() else '&#%d;' % ord(c)
                   for c in value)


def domain_xml(metadata: str) -> bytes:
    return ("<domain type='kvm'><name>vm1</name><uuid>%s</uuid>"
            "<metadata>%s</metadata><vcpu>2</vcpu></domain>"
            % (UUID, metadata)).encode()


def flavor(extra_specs: str = '') -> str:
    return ('<nova:instance xmlns:nova="%s"><nova:flavor name="m1.nfv">%s'
            '</nova:flavor></nova:instance>' % (NOVA_NS, extra_specs))


def parsed(spec: object) -> tuple:
    return (getattr(spec, 'l3_ways'), getattr(spec, 'pool'),
            getattr(spec, 'mb_percent'), getattr(spec, 'mb_mbps'),
            getattr(spec, 'l3_kib'))


# -- the surfaces: values -> (l3_ways, pool, mb_percent, mb_mbps, l3_kib) or
# an error
ELEMENTS = {'l3_ways': ('l3', 'ways'), 'l3_kib': ('l3', 'kib'),
            'pool': ('pool', 'name'), 'mb_percent': ('mb', 'percent'),
            'mb_mbps': ('mb', 'mbps')}
#: The fields of a VM's request (extra specs, [flavors]): OvS's and the
#: pools' and the size.
VM_FIELDS = ('l3_ways', 'l3_kib', 'pool', 'mb_percent', 'mb_mbps')


def annotation(values: dict[str, str]) -> tuple:
    attrs: dict[str, list[str]] = {}
    for field, value in values.items():
        element, attr = ELEMENTS[field]
        attrs.setdefault(element, []).append(
            '%s="%s"' % (attr, xml_escaped(value)))
    body = ''.join('<rdt:%s %s/>' % (element, ' '.join(items))
                   for element, items in attrs.items())
    data = domain_xml('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">%s'
                      '</rdt:rdt>' % body)
    return parsed(domain.resolve(domain.parse(data), SETTINGS))


def extra_specs(values: dict[str, str]) -> tuple:
    specs = ''.join('<nova:extraSpec name="rdt:%s">%s</nova:extraSpec>'
                    % (f, xml_escaped(v)) for f, v in values.items())
    data = domain_xml(flavor('<nova:extraSpecs>%s</nova:extraSpecs>' % specs))
    return parsed(domain.resolve(domain.parse(data), SETTINGS))


def flavors_section(values: dict[str, str]) -> tuple:
    settings = Settings.defaults(pools={p: {'l3_ways': 1} for p in POOLS})
    settings.flavors = {'m1.nfv': ', '.join('rdt:%s=%s' % kv
                                            for kv in values.items())}
    return parsed(domain.resolve(domain.parse(domain_xml(flavor())),
                                 settings))


KNOBS = {'l3_ways': 'rdt-pmd-l3-ways', 'pool': 'rdt-pmd-pool',
         'mb_percent': 'rdt-pmd-mb-percent', 'mb_mbps': 'rdt-pmd-mb-mbps'}


def ovs_knobs(values: dict[str, str]) -> tuple:
    # A host taking whichever cap the row gives (refusals by the host's
    # kind of MBA: test_platform_refusals.py).
    field = 'mb_mbps' if 'mb_mbps' in values else 'mb_percent'
    placement = knobs.parse({KNOBS[f]: v for f, v in values.items()}, POOLS,
                            mb_field=field)
    return (placement.ways, placement.pool, placement.mb_percent,
            placement.mb_mbps, None)


class ConfigFile:
    """ovs-rdt.conf: a pool's l3_ways and mb_percent, a pool's name.

    Values are written quoted (``l3_ways = " 3"``: the quotes go, the space
    stays); an empty value means "unset" in the file format, and the list
    syntax of ``[allocation] pools`` trims its items, so those rows do not
    apply.  A pool is not a request: combinations do not apply either.
    """

    def __init__(self, tmp_path: object) -> None:
        self.path = '%s/ovs-rdt.conf' % tmp_path

    @staticmethod
    def applies(values: dict[str, str]) -> bool:
        if set(values) not in ({'l3_ways'}, {'l3_ways', 'mb_percent'},
                               {'l3_ways', 'mb_mbps'}, {'pool'}):
            return False
        return all(v.strip() and '\n' not in v and v[0] not in '"\''
                   and (f != 'pool' or (v == v.strip() and ',' not in v))
                   for f, v in values.items())

    def __call__(self, values: dict[str, str]) -> tuple:
        name = values.get('pool', 'hp')
        text = '[allocation]\npools = %s\n[pool:%s]\nl3_ways = "%s"\n' % (
            name, name, values.get('l3_ways', '1'))
        for field in ('mb_percent', 'mb_mbps'):
            if field in values:
                text += '%s = "%s"\n' % (field, values[field])
        with open(self.path, 'w', encoding='utf-8') as fh:
            fh.write(text)
        try:
            pool = conf.load(self.path).pools[name]
        except ConfigError as exc:
            # The file and line of the option named come first (issue 51
            # trial 5); the rest is every surface's message.
            field = exc.args[0].split('] ', 1)[1].split()[0].rstrip(':')
            line = next(n for n, ln in enumerate(text.splitlines(), 1)
                        if ln.startswith(field + ' ='))
            where = 'config file %s line %d: ' % (self.path, line)
            assert str(exc).startswith(where), (str(exc), where)
            raise ConfigError(str(exc)[len(where):]) from None
        if 'pool' in values:
            return (None, name, None, None, None)
        return (pool.l3_ways, None, pool.mb_percent, pool.mb_mbps, None)


Surface = Callable[[dict[str, str]], tuple]
SURFACES: dict[str, tuple[dict[str, str], type[Exception]]] = {
    'annotation': ({'l3_ways': '<rdt:l3 ways>', 'l3_kib': '<rdt:l3 kib>',
                    'pool': '<rdt:pool name>',
                    'mb_percent': '<rdt:mb percent>',
                    'mb_mbps': '<rdt:mb mbps>'}, InvalidValue),
    'extra_specs': ({f: 'flavor m1.nfv extra spec rdt:' + f
                     for f in VM_FIELDS}, InvalidValue),
    'flavors_section': ({f: '[flavors] m1.nfv rdt:' + f for f in VM_FIELDS},
                        ConfigError),
    'ovs_knobs': ({f: 'other_config:' + k for f, k in KNOBS.items()},
                  InvalidValue),
    'config_file': ({'l3_ways': '[pool:hp] l3_ways', 'pool':
                     '[allocation] pools',
                     'mb_percent': '[pool:hp] mb_percent',
                     'mb_mbps': '[pool:hp] mb_mbps'}, ConfigError),
}


def applies(name: str, row: Row) -> bool:
    if 'l3_kib' in row.values and name in ('ovs_knobs', 'config_file'):
        return False      # a size is a VM's request only
    if name == 'flavors_section':
        # KEY=VALUE items separated by "," or ";", trimmed.
        return not any(c.isspace() or c in ',;=' for v in row.values.values()
                       for c in v)
    if name == 'config_file':
        return ConfigFile.applies(row.values)
    return True


@pytest.mark.parametrize('name', list(SURFACES))
@pytest.mark.parametrize('row', ROWS, ids=repr)
def test_every_surface_gives_the_same_verdict_and_message(
        name: str, row: Row, tmp_path: object) -> None:
    if not applies(name, row):
        return      # not expressible there (see applies): nothing to check
    surface: Surface = (ConfigFile(tmp_path) if name == 'config_file'
                        else globals()[name])
    fields, error = SURFACES[name]
    if row.ok:
        got = surface(row.values)
        if name == 'config_file' and 'pool' in row.values:
            assert got[1] == row.want[1]
        else:
            assert got == row.want
        return
    with pytest.raises(error) as err:
        surface(row.values)
    assert str(err.value) == row.message(fields)


def test_each_surface_is_run_on_most_rows() -> None:
    """The table is not skipped wholesale on any surface."""
    for name in SURFACES:
        used = [row for row in ROWS if applies(name, row)]
        assert len(used) >= len(ROWS) // 2, name
        assert any(row.ok for row in used) and \
            any(not row.ok for row in used), name
