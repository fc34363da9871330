"""ovs_rdt.domain_xml: safe parsing and validation of the domain XML."""
import pytest

from ovs_rdt.conf import Settings
from ovs_rdt import domain_xml as domain
from ovs_rdt.exceptions import AnnotationError, ConfigError, InvalidValue

UUID = '0b0580e0-4511-437a-855b-3e988e147bd5'
NOVA = 'http://openstack.org/xmlns/libvirt/nova/1.1'


def xml(metadata='', vcpu="<vcpu placement='static'>2</vcpu>", cputune='',
        name='vm1', uuid=UUID):
    return ("""<domain type='kvm' id='1'>
  <name>%s</name>
  <uuid>%s</uuid>
  <metadata>%s</metadata>
  <memory unit='KiB'>65536</memory>
  %s
  %s
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices>
</domain>""" % (name, uuid, metadata, vcpu, cputune)).encode()


def rdt(body):
    return '<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">%s</rdt:rdt>' % body


def nova(specs=None, flavor='m1.nfv', ns=NOVA):
    extra = ''
    if specs is not None:
        extra = '<nova:extraSpecs>%s</nova:extraSpecs>' % ''.join(
            '<nova:extraSpec name="%s">%s</nova:extraSpec>' % kv
            for kv in specs.items())
    return ('<nova:instance xmlns:nova="%s"><nova:name>i-1</nova:name>'
            '<nova:flavor name="%s"><nova:memory>64</nova:memory>%s'
            '</nova:flavor></nova:instance>' % (ns, flavor, extra))


SETTINGS = Settings.defaults(pools={'noisy': {'l3_ways': 2},
                                    'hp': {'l3_ways': 4}})


def spec_of(data, settings=SETTINGS):
    return domain.resolve(domain.parse(data), settings)


def error_of(data, settings=SETTINGS):
    with pytest.raises((InvalidValue, ConfigError)) as info:
        spec_of(data, settings)
    msg = str(info.value)
    assert '\n' not in msg
    return msg


# -- basic fields ---------------------------------------------------------
def test_name_uuid_and_annotation():
    dom = domain.parse(xml(rdt('<rdt:l3 ways="3"/>')))
    assert (dom.name, dom.uuid) == ('vm1', UUID)
    assert dom.annotation == {'l3': '3'}
    spec = domain.resolve(dom, SETTINGS)
    assert (spec.l3_ways, spec.pool, spec.mb_percent) == (3, None, None)
    assert spec.source == 'the <rdt:rdt> annotation'


def test_uuid_normalised_and_validated():
    dom = domain.parse(xml(uuid=UUID.upper().replace('-', '')))
    assert dom.uuid == UUID
    for bad in ('../../etc', UUID + '0'):
        dom = domain.parse(xml(uuid=bad))
        with pytest.raises(InvalidValue) as err:
            dom.uuid
        assert str(err.value) == "<uuid>: '%s' is not a UUID" % bad
    # Text around it is XML layout (libvirt's own parser skips it too).
    assert domain.parse(xml(uuid=' %s\n' % UUID)).uuid == UUID
    # Checked when first used (a VM that asks for nothing never needs it).
    dom = domain.parse(b'<domain><name>x</name></domain>')
    with pytest.raises(AnnotationError, match='has no <uuid>'):
        dom.uuid


@pytest.mark.parametrize('name', ['a/b', '..', ''])
def test_bad_names(name):
    assert error_of(xml(name=name)) == \
        "<name>: '%s' is not a valid domain name" % name


def test_no_annotation_means_nothing():
    dom = domain.parse(xml())
    assert not dom.wants_something
    assert domain.resolve(dom, SETTINGS) is None


def test_empty_annotation_means_nothing_even_with_extra_specs():
    dom = domain.parse(xml(rdt('') + nova({'rdt:l3_ways': '4'})))
    assert dom.wants_something
    assert domain.resolve(dom, SETTINGS) is None


def test_foreign_metadata_ignored():
    other = '<app1:foo xmlns:app1="http://app1.org/app1/">bar</app1:foo>'
    assert spec_of(xml(other)) is None


# -- the annotation's faults: one message each ----------------------------
@pytest.mark.parametrize('body, message', [
    ('<rdt:l3 ways="0"/>', "<rdt:l3 ways>: '0' must be from 1 to 64"),
    ('<rdt:l3 ways="abc"/>', "<rdt:l3 ways>: 'abc' is not a whole number"),
    ('<rdt:l3 ways="-1"/>', "<rdt:l3 ways>: '-1' is not a whole number"),
    ('<rdt:l3 ways="2.5"/>', "<rdt:l3 ways>: '2.5' is not a whole number"),
    ('<rdt:l3 ways=" 2 "/>', "<rdt:l3 ways>: ' 2 ' is not a whole number"),
    ('<rdt:l3 ways="&#x663;"/>',
     "<rdt:l3 ways>: '\u0663' is not a whole number"),
    ('<rdt:l3 ways="65"/>', "<rdt:l3 ways>: '65' must be from 1 to 64"),
    ('<rdt:l3 ways="3"/><rdt:pool name="noisy"/>',
     '<rdt:l3 ways> and <rdt:pool name> exclude each other'),
    ('<rdt:pool name="bogus"/>',
     "<rdt:pool name>: 'bogus' names no pool configured on this host "
     '(configured: hp, noisy; see [allocation] pools)'),
    ('<rdt:l3 ways="3" size="2"/>',
     '<rdt:l3 size="2">: unknown attribute "size" (<rdt:l3> takes only '
     '"ways" or "kib")'),
    ('<rdt:l3 rdt:ways="2"/>', 'unknown attribute "rdt:ways"'),
    ('<rdt:l3/>', '<rdt:l3>: the "ways" or "kib" attribute is required'),
    ('<rdt:l2 ways="3"/>', '<rdt:l2>: unknown element in the '
     'urn:ovs-rdt:libvirt:1 annotation'),
    ('<other xmlns="urn:x"/>', '<{urn:x}other>: unknown element'),
    ('<rdt:l3 ways="3"/><rdt:l3 ways="4"/>',
     '<rdt:l3> appears twice in <rdt:rdt>'),
    ('<rdt:l3 ways="3"><rdt:x/></rdt:l3>', '<rdt:l3> takes no child elements'),
    ('<rdt:mb percent="150"/><rdt:l3 ways="2"/>',
     "<rdt:mb percent>: '150' must be from 1 to 100"),
    ('<rdt:mb percent="0"/><rdt:l3 ways="2"/>',
     "<rdt:mb percent>: '0' must be from 1 to 100"),
    ('<rdt:mb percent="50"/>',
     '<rdt:mb percent> needs <rdt:l3 ways> too'),
    ('<rdt:pool name="noisy"/><rdt:mb percent="50"/>',
     '<rdt:mb percent> cannot go with <rdt:pool name>'),
    ('<rdt:pool name=""/>', "<rdt:pool name>: '' is not a pool name"),
    ('<rdt:pool name=" noisy"/>',
     "<rdt:pool name>: ' noisy' is not a pool name"),
    ('three', '<rdt:rdt> holds text "three"'),
])
def test_annotation_errors(body, message):
    assert message in error_of(xml(rdt(body)))


def test_annotation_attribute_on_rdt_rejected():
    data = xml('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1" ways="3"/>')
    assert 'unknown attribute "ways" (<rdt:rdt> takes none)' in error_of(data)


def test_annotation_twice_rejected():
    data = xml(rdt('<rdt:l3 ways="3"/>') + rdt('<rdt:l3 ways="4"/>'))
    assert '<rdt:rdt> appears twice in <metadata>' in error_of(data)


def test_misplaced_annotation_rejected():
    data = xml('<rdt:l3 xmlns:rdt="urn:ovs-rdt:libvirt:1" ways="3"/>')
    assert '<rdt:l3> must be inside <rdt:rdt' in error_of(data)


def test_nested_annotation_rejected():
    data = xml('<x:y xmlns:x="urn:x">%s</x:y>' % rdt('<rdt:l3 ways="1"/>'))
    assert '<rdt:rdt> must be directly in <metadata>' in error_of(data)


def test_values_in_messages_are_escaped_and_bounded():
    msg = error_of(xml(rdt('<rdt:l3 ways="%s&#10;&quot;x"/>' % ('9' * 200))))
    assert '\n' not in msg and len(msg) < 200
    assert '...' in msg


def test_pool_and_mb():
    spec = spec_of(xml(rdt('<rdt:pool name="noisy"/>')))
    assert (spec.l3_ways, spec.pool) == (None, 'noisy')
    spec = spec_of(xml(rdt('<rdt:l3 ways="02"/><rdt:mb percent="50"/>')))
    assert (spec.l3_ways, spec.mb_percent) == (2, 50)


# -- safety ---------------------------------------------------------------
def test_doctype_and_entities_refused():
    bomb = (b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
            b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;">]>'
            b'<domain><name>&lol2;</name></domain>')
    with pytest.raises(AnnotationError, match='document type declaration'):
        domain.parse(bomb)
    external = (b'<!DOCTYPE d SYSTEM "file:///etc/passwd"><domain/>')
    with pytest.raises(AnnotationError, match='document type declaration'):
        domain.parse(external)
    with pytest.raises(AnnotationError, match='undefined entity'):
        domain.parse(b'<domain><name>&x;</name></domain>')


def test_size_depth_and_text_bounded():
    with pytest.raises(AnnotationError, match='larger than'):
        domain.parse(b' ' * (domain.MAX_XML_BYTES + 1))
    deep = b'<domain>' + b'<a>' * 300 + b'</a>' * 300 + b'</domain>'
    with pytest.raises(AnnotationError, match='deeper than 257 levels'):
        domain.parse(deep)
    # libxml2 (so libvirt) takes 257 levels, <domain> the first
    for levels, ok in ((257, True), (258, False)):
        deep = xml('<a>' * (levels - 2) + '</a>' * (levels - 2))
        if ok:
            domain.parse(deep)
        else:
            with pytest.raises(AnnotationError, match='deeper than 257'):
                domain.parse(deep)
    with pytest.raises(AnnotationError, match='more than'):
        domain.parse(xml(name='x' * 5000))


@pytest.mark.parametrize('data, message', [
    (b'', 'no domain XML'),
    (b'<domain>', 'not well-formed'),
    (b'<network/>', 'not a libvirt domain'),
])
def test_garbage(data, message):
    with pytest.raises(AnnotationError, match=message):
        domain.parse(data)


# -- vCPU placement -------------------------------------------------------
def test_unpinned_means_any_cpu():
    assert domain.parse(xml()).vcpu_cpus() is None


def test_vcpu_cpuset():
    dom = domain.parse(xml(vcpu="<vcpu cpuset='0-3,^1,8'>2</vcpu>"))
    assert dom.vcpu_cpus() == {0, 2, 3, 8}


def test_vcpu_cpuset_ignored_with_auto_placement():
    dom = domain.parse(xml(vcpu="<vcpu placement='auto' cpuset='0'>2</vcpu>"))
    assert dom.vcpu_cpus() is None


def test_vcpupin_overrides_and_partial_pinning():
    pins = ("<cputune><vcpupin vcpu='0' cpuset='20'/>"
            "<vcpupin vcpu='1' cpuset='21-22'/></cputune>")
    dom = domain.parse(xml(vcpu='<vcpu cpuset="0">2</vcpu>', cputune=pins))
    assert dom.vcpu_cpus() == {20, 21, 22}
    # vCPU 2 is not pinned and there is no <vcpu cpuset>: any CPU.
    dom = domain.parse(xml(vcpu='<vcpu>3</vcpu>', cputune=pins))
    assert dom.vcpu_cpus() is None
    dom = domain.parse(xml(vcpu='<vcpu cpuset="5">3</vcpu>', cputune=pins))
    assert dom.vcpu_cpus() == {5, 20, 21, 22}


@pytest.mark.parametrize('cpuset, message', [
    ('x', "<vcpu cpuset>: 'x' is not a CPU list: 'x' is not a CPU id or range"),
    ('3-1', "<vcpu cpuset>: '3-1' is not a CPU list: range '3-1' runs "
     'backwards'),
    ('0-99999999', 'is not a CPU id or range'),
    ('1,^1', "<vcpu cpuset>: '1,^1' is an empty CPU set"),
])
def test_bad_cpusets(cpuset, message):
    dom = domain.parse(xml(vcpu='<vcpu cpuset="%s">1</vcpu>' % cpuset))
    with pytest.raises(InvalidValue) as err:
        dom.vcpu_cpus()
    assert message in str(err.value)
    pin = "<cputune><vcpupin vcpu='0' cpuset='%s'/></cputune>" % cpuset
    dom = domain.parse(xml(vcpu='<vcpu>1</vcpu>', cputune=pin))
    with pytest.raises(InvalidValue) as err:
        dom.vcpu_cpus()
    assert str(err.value).startswith('<vcpupin vcpu="0" cpuset>: ')


def test_cpuset_parts_apply_in_order_like_libvirt():
    # virBitmapParse sets and clears bits in order: "^20,0-3,20" holds 20.
    dom = domain.parse(xml(vcpu='<vcpu cpuset="^20,0-3,20">1</vcpu>'))
    assert dom.vcpu_cpus() == {0, 1, 2, 3, 20}
    dom = domain.parse(xml(vcpu='<vcpu cpuset="0-3,^2">1</vcpu>'))
    assert dom.vcpu_cpus() == {0, 1, 3}


def test_cpusets_cost_bounded_by_the_text():
    import time
    # 16384 vCPUs, each pinned to (nearly) every CPU id there is: as sets,
    # a billion elements; as bit masks, a moment.
    pins = ''.join("<vcpupin vcpu='%d' cpuset='%d-65535'/>" % (i, i % 7)
                   for i in range(domain.MAX_VCPUS))
    dom = domain.parse(xml(vcpu='<vcpu>%d</vcpu>' % domain.MAX_VCPUS,
                           cputune='<cputune>%s</cputune>' % pins))
    start = time.monotonic()
    assert len(dom.vcpu_cpus()) == 65536
    assert time.monotonic() - start < 5


def test_bad_vcpu_count():
    dom = domain.parse(xml(vcpu='<vcpu cpuset="1">many</vcpu>'))
    with pytest.raises(InvalidValue, match="<vcpu>: 'many' is not a whole"):
        dom.vcpu_cpus()


# -- Nova extra specs and [flavors] ---------------------------------------
def test_nova_extra_specs():
    dom = domain.parse(xml(nova({'hw:cpu_policy': 'dedicated',
                                 'rdt:l3_ways': '3', 'rdt:mb_percent': '40'})))
    assert dom.flavor_name == 'm1.nfv'
    spec = domain.resolve(dom, SETTINGS)
    assert (spec.l3_ways, spec.mb_percent, spec.pool) == (3, 40, None)
    assert spec.source == 'flavor m1.nfv extra specs'
    spec = spec_of(xml(nova({'rdt:pool': 'hp'})))
    assert spec.pool == 'hp'


def test_annotation_wins_over_extra_specs():
    data = xml(nova({'rdt:l3_ways': '5'}) + rdt('<rdt:pool name="noisy"/>'))
    spec = spec_of(data)
    assert (spec.pool, spec.l3_ways) == ('noisy', None)


@pytest.mark.parametrize('specs, message', [
    ({'rdt:l3_ways': 'abc'}, "flavor m1.nfv extra spec rdt:l3_ways: 'abc' is "
     'not a whole number'),
    ({'rdt:l3_ways': ' 3'}, "rdt:l3_ways: ' 3' is not a whole number"),
    ({'rdt:l3_ways': '0'}, "rdt:l3_ways: '0' must be from 1 to 64"),
    ({'rdt:l3ways': '3'}, 'flavor m1.nfv extra spec rdt:l3ways: unknown '
     'ovs-rdt key (known: rdt:l3_ways, rdt:l3_kib, rdt:pool, '
     'rdt:mb_percent, rdt:mb_mbps)'),
    ({'rdt:l3_ways': '3', 'rdt:pool': 'hp'}, 'exclude each other'),
    ({'rdt:pool': 'nope'}, "flavor m1.nfv extra spec rdt:pool: 'nope' names "
     'no pool configured'),
    ({'rdt:mb_percent': '101', 'rdt:l3_ways': '1'},
     "rdt:mb_percent: '101' must be from 1 to 100"),
])
def test_extra_spec_errors(specs, message):
    assert message in error_of(xml(nova(specs)))


def test_old_nova_namespace_gives_flavor_name_only():
    dom = domain.parse(xml(nova({'rdt:l3_ways': '3'},
                                ns='http://openstack.org/xmlns/libvirt/nova/'
                                   '1.0')))
    assert dom.flavor_name == 'm1.nfv'
    assert dom.extra_specs is None


def test_flavors_section_fallback():
    settings = Settings.defaults(pools={'noisy': {'l3_ways': 2}})
    settings.flavors = {'m1.nfv': 'rdt:l3_ways=3, rdt:mb_percent=50',
                        'm1.noisy': 'pool=noisy'}
    spec = spec_of(xml(nova()), settings)
    assert (spec.l3_ways, spec.mb_percent) == (3, 50)
    assert spec.source == '[flavors] m1.nfv'
    spec = spec_of(xml(nova(flavor='m1.noisy')), settings)
    assert spec.pool == 'noisy'
    assert spec_of(xml(nova(flavor='m1.small')), settings) is None
    # Extra specs in the XML win over [flavors].
    spec = spec_of(xml(nova({'rdt:l3_ways': '1'})), settings)
    assert spec.l3_ways == 1


@pytest.mark.parametrize('value, message', [
    ('rdt:l3_ways', '[flavors] m1.nfv = rdt:l3_ways: "rdt:l3_ways" is not '
     'KEY=VALUE'),
    ('rdt:l3_ways=x', "[flavors] m1.nfv rdt:l3_ways: 'x' is not a whole "
     'number'),
    ('rdt:l3_ways=1, l3_ways=2', 'rdt:l3_ways is given twice'),
    ('rdt:colour=red', '[flavors] m1.nfv rdt:colour: unknown ovs-rdt key'),
])
def test_flavors_section_errors_are_config_errors(value, message):
    settings = Settings.defaults()
    settings.flavors = {'m1.nfv': value}
    with pytest.raises(ConfigError) as info:
        spec_of(xml(nova()), settings)
    assert message in str(info.value)


def test_wants_something():
    assert domain.parse(xml(rdt(''))).wants_something
    assert domain.parse(xml(nova())).wants_something
    assert not domain.parse(xml('<x xmlns="urn:y"/>')).wants_something


# -- what libvirt really passes (captured from libvirt 9.0's hooks) ---------
def test_unbound_prefix_in_foreign_metadata_ignored():
    # libvirt keeps <y:z q:a> nested in another application's metadata as
    # written, undeclared prefixes and all: expat's namespace mode refused
    # the whole document, so such a VM could not start at all.
    other = ('<app:x xmlns:app="urn:app">\n      <y:z q:a="1">t</y:z>\n'
             '    </app:x>')
    assert spec_of(xml(other)) is None
    assert not domain.parse(xml(other)).wants_something
    data = xml(other + rdt('<rdt:l3 ways="2"/>'))
    assert spec_of(data).l3_ways == 2


def test_default_namespace_annotation():
    # virsh define keeps <rdt xmlns="urn:ovs-rdt:libvirt:1"> as written.
    data = xml('<rdt xmlns="urn:ovs-rdt:libvirt:1"><l3 ways="2"/>'
               '<mb percent="40"/></rdt>')
    spec = spec_of(data)
    assert (spec.l3_ways, spec.mb_percent) == (2, 40)
    data = xml('<rdt xmlns="urn:ovs-rdt:libvirt:1"><l3 ways="2" '
               'size="1"/></rdt>')
    assert 'unknown attribute "size"' in error_of(data)


def test_namespaced_attributes_resolved():
    # Another prefix for our namespace is still our namespace; xmlns
    # declarations themselves are not attributes.
    data = xml('<r:rdt xmlns:r="urn:ovs-rdt:libvirt:1"><r:l3 ways="2" '
               'xmlns:q="urn:q"/></r:rdt>')
    assert spec_of(data).l3_ways == 2
    data = xml(rdt('<rdt:l3 xmlns:r2="urn:ovs-rdt:libvirt:1" r2:ways="2"/>'))
    assert 'unknown attribute "rdt:ways"' in error_of(data)
    data = xml(rdt('<rdt:l3 ways="2" q:x="1"/>'))
    assert 'unknown attribute "q:x"' in error_of(data)
    # A namespace "URI" with a space cannot pose as ours: it is a typo.
    data = xml('<f:rdt xmlns:f="urn:ovs-rdt:libvirt:1 x"><f:l3 ways="2"/>'
               '</f:rdt>')
    assert error_of(data).startswith(
        '<f:rdt> is in the namespace "urn:ovs-rdt:libvirt:1%20x"')


TYPO_NS = [
    # (how it is written, the namespace found)
    ('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt"><rdt:l3 ways="2"/></rdt:rdt>',
     'rdt:rdt', 'urn:ovs-rdt:libvirt', 'xmlns:rdt'),
    ('<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:2"><rdt:l3 ways="2"/>'
     '</rdt:rdt>', 'rdt:rdt', 'urn:ovs-rdt:libvirt:2', 'xmlns:rdt'),
    ('<rdt xmlns="URN:OVS-RDT:libvirt:1"><l3 ways="2"/></rdt>', 'rdt',
     'URN:OVS-RDT:libvirt:1', 'xmlns'),
    ('<r:rdt xmlns:r="urn:ovs-rdt"/>', 'r:rdt', 'urn:ovs-rdt', 'xmlns:r'),
    # Inside a good annotation, or anywhere below <metadata>.
    (rdt('<x:l3 xmlns:x="urn:ovs-rdt:libvirt:1.0" ways="2"/>'), 'x:l3',
     'urn:ovs-rdt:libvirt:1.0', 'xmlns:x'),
    ('<app:x xmlns:app="urn:app"><r:pool xmlns:r="urn:ovs-rdt:pool" '
     'name="hp"/></app:x>', 'r:pool', 'urn:ovs-rdt:pool', 'xmlns:r'),
]


@pytest.mark.parametrize('metadata, element, found, decl', TYPO_NS)
def test_mistyped_namespace_is_refused(metadata, element, found, decl):
    # Before, such an annotation was someone else's metadata: the VM
    # started in the default group without a word.
    data = xml(metadata)
    with pytest.raises(AnnotationError) as info:
        domain.parse(data)
    assert str(info.value) == (
        '<%s> is in the namespace "%s", which ovs-rdt does not know: its '
        'annotation\'s namespace is "urn:ovs-rdt:libvirt:1" (%s='
        '"urn:ovs-rdt:libvirt:1")' % (element, found, decl))
    # The same with Nova's extra specs beside it: the annotation was meant.
    with pytest.raises(AnnotationError):
        domain.parse(xml(metadata + nova({'rdt:l3_ways': '2'})))


def test_other_urn_namespaces_are_someone_elses():
    for ns in ('urn:ovs', 'urn:ovsrdt:x', 'http://ovs-rdt.org/x',
               'urn:other:urn:ovs-rdt:libvirt'):
        data = xml('<a:rdt xmlns:a="%s"><a:l3 ways="2"/></a:rdt>' % ns)
        assert spec_of(data) is None, ns


def test_depth_libvirt_accepts_is_accepted():
    # libvirt defines domains nested up to libxml2's 256 levels.
    deep = ('<a:x xmlns:a="urn:a">' + '<a:y>' * 150 + '</a:y>' * 150
            + '</a:x>')
    assert spec_of(xml(deep)) is None


def test_name_kept_exactly():
    # libvirt accepts " vm 1 " and names its pidfile " vm 1 .pid".
    assert domain.parse(xml(name=' vm 1 ')).name == ' vm 1 '
    assert domain.parse(xml(name='caf\u00e9 "q" \U0001f600')).name == \
        'caf\u00e9 "q" \U0001f600'


def test_show_escapes_every_plane():
    from ovs_rdt.exceptions import show
    assert show('a\nb\u2028\U000e0001') == \
        'a\\x0ab\\u2028\\U000e0001'


def test_huge_foreign_metadata_is_linear():
    # This process's CPU time, not the wall clock: other work on the
    # machine must not make it fail (a quadratic walk of 200,000 foreign
    # elements takes minutes; the linear one well under a second).
    import time
    other = '<a:x xmlns:a="urn:a">%s</a:x>' % ('<a:y b="c">t</a:y>' * 200000)
    data = xml(other)
    assert len(data) < domain.MAX_XML_BYTES
    start = time.process_time()
    assert spec_of(data) is None
    assert time.process_time() - start < 5


@pytest.mark.parametrize('tune', [
    "<cachetune vcpus='0-1'><cache id='0' level='3' type='both' size='3' "
    "unit='MiB'/></cachetune>",
    "<memorytune vcpus='0'><node id='0' bandwidth='20'/></memorytune>",
])
def test_libvirt_cachetune_conflicts_with_a_request(tune):
    cputune = '<cputune>%s</cputune>' % tune
    data = xml(rdt('<rdt:l3 ways="2"/>'), cputune=cputune)
    msg = error_of(data)
    assert msg.startswith('the domain has <cputune><%s vcpus="'
                          % tune[1:].split()[0])
    assert msg.endswith('it cannot also have 2 L3 ways (from the <rdt:rdt> '
                        'annotation) from ovs-rdt: keep one or the other')
    # Without a request, libvirt's tuning is none of our business.
    assert spec_of(xml(cputune=cputune)) is None


def test_an_unconfigured_pool_name_is_escaped_beside_a_cachetune():
    # Found by tests/stress/test_fuzz.py (long profile): the <cachetune>
    # refusal, checked before the pool's, described the request with the
    # pool name as it came (a bidi override, DEL) into the one-line message.
    cputune = ("<cputune><cachetune vcpus='0'><cache id='0' level='3' "
               "type='both' size='3' unit='MiB'/></cachetune></cputune>")
    msg = error_of(xml(rdt('<rdt:pool name="\u202eevil\x7f"/>'),
                       cputune=cputune))
    assert msg.isprintable(), msg
    assert '\\u202eevil\\x7f' in msg
