"""What the libvirt hook reads from a domain XML, parsed safely.

The XML on the hook's standard input comes from whoever may define domains,
so it is parsed with :mod:`xml.parsers.expat` directly: any document type
declaration (the only place entities can be declared) is refused, so there
is no entity expansion and nothing external is ever loaded; input size and
nesting depth are bounded.  Only the few things the hook needs are kept:

* ``<name>``, ``<uuid>`` (validated; the UUID, never the name, is what group
  names are built from),
* ``<vcpu cpuset placement>N</vcpu>`` and ``<cputune><vcpupin vcpu cpuset>``,
* our annotation ``<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">`` in
  ``<metadata>``, with ``<rdt:l3 ways>``, ``<rdt:pool name>``, ``<rdt:mb
  percent>``,
* Nova's ``<nova:flavor name>`` and its ``<nova:extraSpecs>``.

Every fault raises :class:`AnnotationError` with one line naming the
element or key and the value at fault.  :func:`resolve` then picks what the
VM asks for: the annotation wins over the flavor's extra specs, which win
over the ``[flavors]`` section of the configuration (for Nova releases that
do not copy extra specs into the XML).
"""
from __future__ import annotations

from ovs_rdt.exceptions import AnnotationError, ConfigError

RDT_NS = 'urn:ovs-rdt:libvirt:1'
NOVA_NS = 'http://openstack.org/xmlns/libvirt/nova/1.1'
# Older Nova releases wrote this one; only the flavor name is read from it.
NOVA_NS_OLD = 'http://openstack.org/xmlns/libvirt/nova/1.0'

#: Largest domain XML accepted (libvirt's own documents are a few KiB).
MAX_XML_BYTES = 4 * 1024 * 1024
#: Deepest element nesting accepted: libxml2's own limit, so anything libvirt
#: accepted (it refuses "Excessive depth in document: 256") parses here too.
MAX_DEPTH = 256
#: Largest text kept for one element.
MAX_TEXT = 4096
#: Bounds of the values we accept before looking at the platform.
MAX_WAYS = 64
MAX_VCPUS = 16384
MAX_CPU_ID = 65535
MAX_NAME = 1024

_SEP = ' '          # "{uri} {local}": a space is never part of a name or URI
_RDT = RDT_NS + _SEP
_XML_NS = 'http://www.w3.org/XML/1998/namespace'
_HEX = frozenset('0123456789abcdef')

# Our annotation: element -> (attribute, what it means).
_RDT_CHILDREN = {'l3': 'ways', 'pool': 'name', 'mb': 'percent'}
# Flavor extra-spec keys -> annotation field.
EXTRA_SPECS = {'rdt:l3_ways': 'l3_ways', 'rdt:pool': 'pool',
               'rdt:mb_percent': 'mb_percent'}


def show(value: str, limit: int = 48) -> str:
    """A value fit for a one-line message: escaped and bounded."""
    out = []
    for char in value[:limit]:
        if char == '"' or char == '\\':
            out.append('\\' + char)
        elif char.isprintable():
            out.append(char)
        else:
            code = ord(char)
            out.append('\\x%02x' % code if code < 0x100 else
                       '\\u%04x' % code if code < 0x10000 else
                       '\\U%08x' % code)
    return ''.join(out) + ('...' if len(value) > limit else '')


def parse_int(raw: str, label: str, what: str, low: int, high: int) -> int:
    """A bounded decimal integer; the message names ``label``."""
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        raise AnnotationError('%s: %s must be a whole number from %d to %d'
                              % (label, what, low, high))
    value = int(text)
    if value < low:
        raise AnnotationError('%s: %s must be at least %d' % (label, what, low))
    if value > high:
        raise AnnotationError('%s: %s must be at most %d' % (label, what, high))
    return value


def parse_cpuset(raw: str, label: str) -> frozenset[int]:
    """libvirt's cpuset syntax: ``0-3,8,^2`` (``^`` excludes)."""
    return _bits_to_set(_cpuset_bits(raw, label))


def _cpuset_bits(raw: str, label: str) -> int:
    """A cpuset as a bit mask, read as libvirt's virBitmapParse does.

    Parts apply in order (``^2,0-3`` holds 2: the exclusion comes first),
    and a bit mask keeps the cost proportional to the text, never to the
    CPU ids (``0-65535`` on each of thousands of ``<vcpupin>``).
    """
    bits = 0
    for part in raw.split(','):
        part = part.strip()
        if not part:
            continue
        neg = part.startswith('^')
        if neg:
            part = part[1:].strip()
        lo_s, dash, hi_s = part.partition('-')
        try:
            lo = _cpu_id(lo_s)
            hi = _cpu_id(hi_s) if dash else lo
        except ValueError:
            raise AnnotationError('%s: %r is not a CPU id or range'
                                  % (label, show(part))) from None
        if hi < lo:
            raise AnnotationError('%s: range %r runs backwards'
                                  % (label, show(part)))
        mask = ((1 << (hi - lo + 1)) - 1) << lo
        bits = bits & ~mask if neg else bits | mask
    if not bits:
        raise AnnotationError('%s: the CPU set is empty' % label)
    return bits


def _bits_to_set(bits: int) -> frozenset[int]:
    text = bin(bits)[:1:-1]          # bit 0 first, without "0b"
    return frozenset(i for i, c in enumerate(text) if c == '1')


def _cpu_id(text: str) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        raise ValueError(text)
    value = int(text)
    if value > MAX_CPU_ID:
        raise ValueError(text)
    return value


def check_uuid(raw: str) -> str:
    """The canonical (lower-case, dashed) form of a domain UUID."""
    text = raw.strip().lower()
    if len(text) == 32 and set(text) <= _HEX:
        text = '-'.join((text[:8], text[8:12], text[12:16], text[16:20],
                         text[20:]))
    parts = text.split('-')
    if ([len(p) for p in parts] != [8, 4, 4, 4, 12]
            or not set(text.replace('-', '')) <= _HEX):
        raise AnnotationError('<uuid>%s</uuid> is not a UUID' % show(raw))
    return text


def check_name(raw: str) -> str:
    """A domain name usable in ``<qemu_run_dir>/<name>.pid``."""
    if (not raw or raw in ('.', '..') or '/' in raw or '\0' in raw
            or len(raw) > MAX_NAME):
        raise AnnotationError('<name>%s</name> is not a valid domain name'
                              % show(raw))
    return raw


class Spec:
    """What a VM asks for, after validation, with where it came from.

    Exactly one of ``l3_ways`` (a dedicated CLOS) and ``pool`` (a shared
    pool) is set; ``mb_percent`` only with ``l3_ways``.  ``labels`` maps a
    field to how the operator wrote it, for messages.
    """

    __slots__ = ('l3_ways', 'pool', 'mb_percent', 'source', 'labels')

    def __init__(self, source: str, l3_ways: int | None = None,
                 pool: str | None = None, mb_percent: int | None = None,
                 labels: dict[str, str] | None = None) -> None:
        self.source = source
        self.l3_ways = l3_ways
        self.pool = pool
        self.mb_percent = mb_percent
        self.labels = labels or {}

    def label(self, field: str) -> str:
        return self.labels.get(field, field)

    def __repr__(self) -> str:
        return 'Spec(%s: l3_ways=%r, pool=%r, mb_percent=%r)' % (
            self.source, self.l3_ways, self.pool, self.mb_percent)

    def describe(self) -> str:
        if self.pool is not None:
            what = 'pool %s' % self.pool
        else:
            what = '%d L3 ways' % (self.l3_ways or 0)
        if self.mb_percent is not None:
            what += ', memory bandwidth %d%%' % self.mb_percent
        return '%s (from %s)' % (what, self.source)


class Domain:
    """The parts of a domain XML the hook uses."""

    def __init__(self) -> None:
        self.name = ''
        self.uuid = ''
        self.vcpus_raw: str | None = None
        self.vcpu_cpuset_raw: str | None = None
        self.vcpu_placement: str | None = None
        #: (vcpu attribute, cpuset attribute) of every <vcpupin>.
        self.vcpupins_raw: list[tuple[str, str]] = []
        #: Our annotation: element -> attribute value (``None`` when absent).
        self.annotation: dict[str, str] | None = None
        self.flavor_name: str | None = None
        #: Every extra spec of the flavor (``None``: the XML has none).
        self.extra_specs: dict[str, str] | None = None
        #: libvirt's own resctrl tuning: ``<cputune><cachetune vcpus>`` and
        #: ``<memorytune vcpus>``, as (element, vcpus attribute).
        self.libvirt_tunes: list[tuple[str, str]] = []

    @property
    def wants_something(self) -> bool:
        """Whether the XML could ask for an allocation (config not read)."""
        return (self.annotation is not None
                or self.flavor_name is not None
                or bool(self.extra_specs and any(
                    k.startswith('rdt:') for k in self.extra_specs)))

    # -- vCPU placement ---------------------------------------------------
    def vcpu_count(self) -> int:
        if self.vcpus_raw is None:
            return 1
        return parse_int(self.vcpus_raw, '<vcpu>%s</vcpu>'
                         % show(self.vcpus_raw), 'the vCPU count', 1,
                         MAX_VCPUS)

    def vcpu_cpus(self) -> frozenset[int] | None:
        """Host CPUs the vCPUs may run on; None means any CPU.

        A ``<vcpupin>`` decides for its vCPU; the others follow ``<vcpu
        cpuset>`` (ignored with ``placement='auto'``, where numad decides).
        """
        count = self.vcpu_count()
        pins: dict[int, tuple[str, str]] = {}
        for vcpu_s, cpuset in self.vcpupins_raw:
            label = '<vcpupin vcpu="%s" cpuset="%s">' % (
                show(vcpu_s), show(cpuset))
            vcpu = parse_int(vcpu_s, label, 'vcpu', 0, MAX_VCPUS)
            if vcpu < count:
                pins[vcpu] = (cpuset, label)
        bits = 0
        if len(pins) < count:        # some vCPU follows <vcpu cpuset>
            if (self.vcpu_cpuset_raw is None
                    or self.vcpu_placement == 'auto'):
                return None
            bits = _cpuset_bits(self.vcpu_cpuset_raw, '<vcpu cpuset="%s">'
                                % show(self.vcpu_cpuset_raw))
        for cpuset, label in dict(pins.values()).items():  # distinct sets
            bits |= _cpuset_bits(cpuset, label)
        return _bits_to_set(bits)


class _Parser:
    """expat callbacks building a :class:`Domain`."""

    def __init__(self) -> None:
        self.dom = Domain()
        self.stack: list[str] = []
        self.text: list[str] | None = None
        self.text_len = 0
        self.text_depth = -1
        self.in_rdt = False
        self.in_flavor = 0        # depth of the <nova:flavor> element
        self.spec_name: str | None = None
        self.seen_rdt: set[str] = set()
        #: prefix -> namespace URI in effect, per open element.
        self.scopes: list[dict[str, str]] = [{'xml': _XML_NS}]

    # -- refusals -----------------------------------------------------------
    @staticmethod
    def doctype(*_args: object) -> None:
        raise AnnotationError('the domain XML has a document type declaration '
                              '(<!DOCTYPE>); refusing it (no DTDs or entities)')

    @staticmethod
    def entity(*_args: object) -> None:
        raise AnnotationError('the domain XML declares an entity; refusing it')

    @staticmethod
    def external(*_args: object) -> int:
        raise AnnotationError('the domain XML references an external entity; '
                              'refusing it')

    # -- namespaces -----------------------------------------------------------
    # expat's own namespace processing refuses a whole document over one
    # unbound prefix, and libvirt passes those on (it keeps <y:z> nested in
    # another application's metadata as written): one such element would
    # refuse every VM, annotated or not.  So prefixes are resolved here, and
    # an unbound one only makes its element foreign (kept as "y:z").
    def _scope(self, attrs: dict[str, str]) -> dict[str, str]:
        scope = self.scopes[-1]
        decls = [k for k in attrs if k[:5] == 'xmlns'
                 and (len(k) == 5 or k[5] == ':')]
        if decls:
            scope = dict(scope)
            for key in decls:   # (a space would fake our "{uri} {local}")
                scope[key[6:]] = attrs.pop(key).replace(' ', '%20')
        return scope

    @staticmethod
    def _resolve(qname: str, scope: dict[str, str], default: bool) -> str:
        """``p:local`` -> ``{uri} {local}`` (unbound: ``p:local`` as is)."""
        prefix, colon, local = qname.rpartition(':')
        if not colon:
            uri = scope.get('') if default else None
            return uri + _SEP + local if uri else local
        uri = scope.get(prefix)
        return uri + _SEP + local if uri else qname

    # -- elements -----------------------------------------------------------
    def start(self, qname: str, attrs: dict[str, str]) -> None:
        stack = self.stack
        depth = len(stack)
        if depth >= MAX_DEPTH:
            raise AnnotationError('the domain XML nests elements deeper than '
                                  '%d levels' % MAX_DEPTH)
        scope = self._scope(attrs) if attrs else self.scopes[-1]
        self.scopes.append(scope)
        tag = self._resolve(qname, scope, True)
        stack.append(tag)
        if depth == 0:
            if tag != 'domain':
                raise AnnotationError('the XML is not a libvirt domain (its '
                                      'root element is <%s>)'
                                      % show(_local(tag)))
            return
        parent = stack[-2]
        if depth == 1:
            if tag in ('name', 'uuid'):
                self._collect()
            elif tag == 'vcpu':
                self.dom.vcpu_cpuset_raw = attrs.get('cpuset')
                self.dom.vcpu_placement = attrs.get('placement')
                self._collect()
            return
        if depth == 2 and parent == 'cputune':
            if tag == 'vcpupin':
                self.dom.vcpupins_raw.append((attrs.get('vcpu', ''),
                                              attrs.get('cpuset', '')))
            elif tag in ('cachetune', 'memorytune'):
                self.dom.libvirt_tunes.append((tag, attrs.get('vcpus', '')))
            return
        if len(stack) < 3 or stack[1] != 'metadata':
            return
        # Below <metadata>.
        if tag.startswith(_RDT) or self.in_rdt:
            self._rdt_element(tag, {self._resolve(k, scope, False): v
                                    for k, v in attrs.items()}, depth)
            return
        if tag.startswith(NOVA_NS + _SEP) or tag.startswith(NOVA_NS_OLD + _SEP):
            self._nova_element(tag, attrs, depth)

    def _rdt_element(self, tag: str, attrs: dict[str, str],
                     depth: int) -> None:
        local = _local(tag)
        if depth == 2:
            if local != 'rdt':
                raise AnnotationError(
                    '<rdt:%s> must be inside <rdt:rdt xmlns:rdt="%s"> directly '
                    'in <metadata>' % (show(local), RDT_NS))
            if self.dom.annotation is not None:
                raise AnnotationError('<rdt:rdt> appears twice in <metadata>')
            for attr in attrs:
                raise AnnotationError('<rdt:rdt %s="%s">: unknown attribute '
                                      '"%s" (<rdt:rdt> takes none)'
                                      % (show(_local(attr)), show(attrs[attr]),
                                         show(_local(attr))))
            self.dom.annotation = {}
            self.in_rdt = True
            return
        if not self.in_rdt:
            if local == 'rdt':
                raise AnnotationError('<rdt:rdt> must be directly in '
                                      '<metadata>')
            raise AnnotationError(
                '<%s> must be inside <rdt:rdt xmlns:rdt="%s"> directly in '
                '<metadata>' % (show(_pretty(tag)), RDT_NS))
        if depth > 3:
            raise AnnotationError('<rdt:%s> takes no child elements (found '
                                  '<%s> inside it)'
                                  % (show(_local(self.stack[-2])),
                                     show(_pretty(tag))))
        if not tag.startswith(_RDT) or local not in _RDT_CHILDREN:
            raise AnnotationError(
                '<%s>: unknown element in the %s annotation (known: '
                '<rdt:l3 ways="N">, <rdt:pool name="P">, <rdt:mb '
                'percent="N">)' % (show(_pretty(tag)), RDT_NS))
        if local in self.seen_rdt:
            raise AnnotationError('<rdt:%s> appears twice in <rdt:rdt>' % local)
        self.seen_rdt.add(local)
        wanted = _RDT_CHILDREN[local]
        for attr, value in attrs.items():
            if attr != wanted:
                raise AnnotationError(
                    '<rdt:%s %s="%s">: unknown attribute "%s" (<rdt:%s> takes '
                    'only "%s")' % (local, show(_pretty(attr)), show(value),
                                    show(_pretty(attr)), local, wanted))
        if wanted not in attrs:
            raise AnnotationError('<rdt:%s>: the "%s" attribute is required'
                                  % (local, wanted))
        assert self.dom.annotation is not None
        self.dom.annotation[local] = attrs[wanted]

    def _nova_element(self, tag: str, attrs: dict[str, str],
                      depth: int) -> None:
        local = _local(tag)
        if local == 'flavor' and not self.in_flavor:
            self.in_flavor = depth
            if 'name' in attrs:
                self.dom.flavor_name = attrs['name']
            return
        if not self.in_flavor or not tag.startswith(NOVA_NS + _SEP):
            return
        if local == 'extraSpecs' and depth == self.in_flavor + 1:
            if self.dom.extra_specs is None:
                self.dom.extra_specs = {}
        elif (local == 'extraSpec' and depth == self.in_flavor + 2
              and _local(self.stack[-2]) == 'extraSpecs'):
            self.spec_name = attrs.get('name', '')
            self._collect()

    def _collect(self) -> None:
        self.text = []
        self.text_len = 0
        self.text_depth = len(self.stack) - 1

    def chars(self, data: str) -> None:
        if self.text is not None:
            self.text_len += len(data)
            if self.text_len > MAX_TEXT:
                raise AnnotationError('<%s> holds more than %d characters'
                                      % (_local(self.stack[-1]), MAX_TEXT))
            self.text.append(data)
        elif self.in_rdt and data.strip():
            raise AnnotationError('<rdt:%s> holds text "%s"; it takes only '
                                  'attributes' % (show(_local(self.stack[-1])),
                                                  show(data.strip())))

    def end(self, tag: str) -> None:
        stack = self.stack
        depth = len(stack) - 1
        if self.text is not None and depth == self.text_depth:
            text = ''.join(self.text)
            self.text = None
            dom = self.dom
            if depth == 1:
                if tag == 'name':
                    dom.name = text     # as libvirt has it: " vm 1 " is valid
                elif tag == 'uuid':
                    dom.uuid = text.strip()
                elif tag == 'vcpu':
                    dom.vcpus_raw = text.strip()
            elif self.spec_name is not None:
                if dom.extra_specs is None:
                    dom.extra_specs = {}
                name = self.spec_name
                if name.startswith('rdt:') and name in dom.extra_specs:
                    raise AnnotationError('flavor extra spec %s is given twice'
                                          % show(name))
                dom.extra_specs[name] = text.strip()
                self.spec_name = None
        if self.in_rdt and depth == 2:
            self.in_rdt = False
        if self.in_flavor == depth:
            self.in_flavor = 0
        stack.pop()
        self.scopes.pop()


def _local(tag: str) -> str:
    return tag.rpartition(_SEP)[2]


def _pretty(tag: str) -> str:
    """``urn:ovs-rdt:libvirt:1 l3`` -> ``rdt:l3``; other namespaces in full."""
    ns, sep, local = tag.rpartition(_SEP)
    if not sep:
        return local
    if ns == RDT_NS:
        return 'rdt:' + local
    return '{%s}%s' % (ns, local)


def parse(data: bytes) -> Domain:
    """Parse a domain XML; raise AnnotationError (one line) on any fault."""
    from xml.parsers import expat

    if len(data) > MAX_XML_BYTES:
        raise AnnotationError('the domain XML is larger than %d bytes'
                              % MAX_XML_BYTES)
    if not data.strip():
        raise AnnotationError('no domain XML on standard input')
    handler = _Parser()
    parser = expat.ParserCreate()       # namespaces: see _Parser._scope
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = handler.doctype
    parser.EntityDeclHandler = handler.entity
    parser.UnparsedEntityDeclHandler = handler.entity
    parser.ExternalEntityRefHandler = handler.external
    parser.StartElementHandler = handler.start
    parser.EndElementHandler = handler.end
    parser.CharacterDataHandler = handler.chars
    parser.buffer_text = True
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        raise AnnotationError('the domain XML is not well-formed: %s'
                              % expat.ErrorString(exc.code)
                              + ' (line %d, column %d)'
                              % (exc.lineno, exc.offset)) from None
    dom = handler.dom
    dom.uuid = check_uuid(dom.uuid) if dom.uuid else ''
    if not dom.uuid:
        raise AnnotationError('the domain XML has no <uuid>')
    dom.name = check_name(dom.name)
    return dom


# -- what the VM asks for ---------------------------------------------------
def _annotation_spec(values: dict[str, str]) -> Spec | None:
    if not values:
        return None   # an empty <rdt:rdt/>: explicitly nothing
    labels = {}
    spec = Spec('the <rdt:rdt> annotation')
    if 'l3' in values:
        labels['l3_ways'] = '<rdt:l3 ways="%s">' % show(values['l3'])
        spec.l3_ways = parse_int(values['l3'], labels['l3_ways'], 'ways', 1,
                                 MAX_WAYS)
    if 'pool' in values:
        labels['pool'] = '<rdt:pool name="%s">' % show(values['pool'])
        spec.pool = _pool_name(values['pool'], labels['pool'])
    if 'mb' in values:
        labels['mb_percent'] = '<rdt:mb percent="%s">' % show(values['mb'])
        spec.mb_percent = parse_int(values['mb'], labels['mb_percent'],
                                    'percent', 1, 100)
    spec.labels = labels
    _check_combination(spec, '<rdt:l3 ways="N">')
    return spec


def _pool_name(raw: str, label: str) -> str:
    name = raw.strip()
    if not name:
        raise AnnotationError('%s: the pool name is empty' % label)
    return name


def _check_combination(spec: Spec, l3: str) -> None:
    if spec.l3_ways is not None and spec.pool is not None:
        raise AnnotationError('%s and %s exclude each other (in %s): ask for '
                              'a dedicated CLOS or a shared pool, not both'
                              % (spec.label('l3_ways'), spec.label('pool'),
                                 spec.source))
    if spec.mb_percent is not None and spec.pool is not None:
        raise AnnotationError(
            '%s cannot be combined with %s (in %s): a pool\'s bandwidth cap is '
            '[pool:%s] mb_percent' % (spec.label('mb_percent'),
                                      spec.label('pool'), spec.source,
                                      spec.pool))
    if spec.mb_percent is not None and spec.l3_ways is None:
        raise AnnotationError('%s needs %s too (in %s): a bandwidth cap '
                              'applies to a dedicated CLOS'
                              % (spec.label('mb_percent'), l3, spec.source))


def spec_from_pairs(pairs: dict[str, str], source: str,
                    label_fmt: str) -> Spec | None:
    """A Spec from ``rdt:`` extra-spec keys (other keys are ignored).

    ``label_fmt`` % (key, value) names one key in messages.
    """
    values = {k: v for k, v in pairs.items() if k.startswith('rdt:')}
    if not values:
        return None
    spec = Spec(source)
    labels = {}
    for key, raw in values.items():
        field = EXTRA_SPECS.get(key)
        label = label_fmt % (show(key), show(raw))
        if field is None:
            raise AnnotationError('%s: unknown ovs-rdt key "%s" (known: %s)'
                                  % (label, show(key), ', '.join(EXTRA_SPECS)))
        labels[field] = label
        if field == 'l3_ways':
            spec.l3_ways = parse_int(raw, label, 'the way count', 1, MAX_WAYS)
        elif field == 'pool':
            spec.pool = _pool_name(raw, label)
        else:
            spec.mb_percent = parse_int(raw, label, 'the percentage', 1, 100)
    spec.labels = labels
    _check_combination(spec, 'rdt:l3_ways')
    return spec


def parse_flavor_mapping(flavor: str, raw: str) -> dict[str, str]:
    """``rdt:l3_ways=3, rdt:mb_percent=50`` (a ``[flavors]`` value)."""
    out: dict[str, str] = {}
    for item in raw.replace(';', ',').split(','):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition('=')
        key = key.strip()
        if not eq or not key:
            raise ConfigError('[flavors] %s = %s: "%s" is not KEY=VALUE '
                              '(e.g. rdt:l3_ways=3)'
                              % (show(flavor), show(raw, 80), show(item)))
        if not key.startswith('rdt:'):
            key = 'rdt:' + key
        if key in out:
            raise ConfigError('[flavors] %s: %s is given twice'
                              % (show(flavor), show(key)))
        out[key] = value.strip()
    return out


def resolve(dom: Domain, settings: object | None) -> Spec | None:
    """What the VM asks for, validated against the settings; None: nothing.

    The annotation wins (an empty ``<rdt:rdt/>`` means "nothing", whatever
    the flavor says), then the flavor's ``rdt:`` extra specs, then the
    ``[flavors]`` entry for the flavor's name.
    """
    spec: Spec | None
    if dom.annotation is not None:
        spec = _annotation_spec(dom.annotation)
    elif dom.extra_specs and any(k.startswith('rdt:') for k in dom.extra_specs):
        flavor = dom.flavor_name or '?'
        spec = spec_from_pairs(dom.extra_specs,
                               'flavor %s extra specs' % show(flavor),
                               'flavor extra spec %s="%s"')
    elif dom.flavor_name is not None and settings is not None:
        flavors: dict[str, str] = getattr(settings, 'flavors', {})
        raw = flavors.get(dom.flavor_name)
        if raw is None:
            return None
        source = '[flavors] %s' % show(dom.flavor_name)
        try:
            pairs = parse_flavor_mapping(dom.flavor_name, raw)
            spec = spec_from_pairs(pairs, source, source + ' %s=%s')
        except AnnotationError as exc:
            raise ConfigError(str(exc)) from None
        if spec is None:
            return None
    else:
        return None
    if spec is not None and dom.libvirt_tunes:
        # libvirt puts those vCPUs in a resctrl group of its own before
        # "started"; moving them would silently undo the domain's tuning.
        tag, vcpus = dom.libvirt_tunes[0]
        raise AnnotationError(
            'the domain has <cputune><%s vcpus="%s">, so libvirt gives those '
            'vCPUs a resctrl group of its own; it cannot also have %s from '
            'ovs-rdt: keep one or the other'
            % (tag, show(vcpus), spec.describe()))
    if spec is not None and spec.pool is not None and settings is not None:
        pools = getattr(settings, 'pools', {})
        if spec.pool not in pools:
            configured = ', '.join(sorted(pools)) or 'none'
            raise AnnotationError(
                '%s: no pool named "%s" is configured on this host '
                '(configured: %s; see [allocation] pools)'
                % (spec.label('pool'), show(spec.pool), configured))
    return spec
