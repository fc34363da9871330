"""A libvirt domain XML, parsed safely: what ovs-rdt reads of a domain.

Read by the hook, the agent's guests thread and ``check-domain``.  The
XML on the hook's standard input comes from whoever may define domains,
so it is parsed with :mod:`xml.parsers.expat` directly: any document type
declaration (the only place entities can be declared) is refused, so there
is no entity expansion and nothing external is ever loaded; input size and
nesting depth are bounded.  (Not :mod:`xml.etree`, built on the same expat:
it expands entities a document declares and builds the whole tree; not
defusedxml: one more dependency and more imports for a hook that runs in a
new process at every event.)  Only the few things the hook needs are kept:

* ``<name>``, ``<uuid>`` (validated; the UUID, never the name, is what group
  names are built from),
* ``<vcpu cpuset placement>N</vcpu>`` and ``<cputune><vcpupin vcpu cpuset>``,
* our annotation ``<rdt:rdt xmlns:rdt="urn:ovs-rdt:libvirt:1">`` in
  ``<metadata>``, with ``<rdt:l3 ways>``, ``<rdt:pool name>``, ``<rdt:mb
  percent>``; an element in any other ``urn:ovs-rdt...`` namespace (a typo:
  ``urn:ovs-rdt:libvirt``, ``urn:ovs-rdt:libvirt:2``) is refused, never
  taken for someone else's metadata,
* Nova's ``<nova:flavor name>`` and its ``<nova:extraSpecs>``.

Every fault raises :class:`AnnotationError` (or, for a value,
:class:`InvalidValue`) with one line naming the element or key and the
value at fault.  The values are checked by the rules every surface shares
(:mod:`ovs_rdt.inputs`).  :func:`resolve` then picks what the VM asks for:
the annotation wins over the flavor's extra specs, which win over the
``[flavors]`` section of the configuration (for Nova releases that do not
copy extra specs into the XML).
"""
from __future__ import annotations

from ovs_rdt.exceptions import AnnotationError, ConfigError, InvalidValue
from ovs_rdt.exceptions import refuse, show

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (start-up cost)
    from ovs_rdt.inputs.request import CacheRequest

RDT_NS = 'urn:ovs-rdt:libvirt:1'
#: Every namespace starting so (any case) is meant to be ours: only RDT_NS is.
RDT_NS_FAMILY = 'urn:ovs-rdt'
NOVA_NS = 'http://openstack.org/xmlns/libvirt/nova/1.1'
# Older Nova releases wrote this one; only the flavor name is read from it.
NOVA_NS_OLD = 'http://openstack.org/xmlns/libvirt/nova/1.0'

#: Largest domain XML accepted (libvirt's own documents are a few KiB).
MAX_XML_BYTES = 4 * 1024 * 1024
#: Deepest element nesting accepted (``<domain>`` is level 1): libxml2's own
#: limit, so anything libvirt accepted parses here too.  libxml2 refuses an
#: element with more than 256 open above it ("Excessive depth in document:
#: 256"): one 257 levels deep parses.
MAX_DEPTH = 257
#: Largest text kept for one element.
MAX_TEXT = 4096
#: Bounds of the values we accept before looking at the platform.
MAX_VCPUS = 16384
MAX_NAME = 1024

_SEP = ' '          # "{uri} {local}": a space is never part of a name or URI
_RDT = RDT_NS + _SEP
_XML_NS = 'http://www.w3.org/XML/1998/namespace'

# Our annotation: element -> ((attribute, the request field it holds), ...);
# an element takes exactly one of its attributes.  The annotation's values
# are keyed by element (first attribute) or "element attribute" (others).
_RDT_CHILDREN = {'l3': (('ways', 'l3_ways'), ('kib', 'l3_kib')),
                 'pool': (('name', 'pool'),),
                 'mb': (('percent', 'mb_percent'), ('mbps', 'mb_mbps'))}


def _annotation_key(element: str, index: int, attr: str) -> str:
    return element if index == 0 else '%s %s' % (element, attr)


def check_name(raw: str) -> str:
    """A domain name usable in ``<qemu_run_dir>/<name>.pid``."""
    if (not raw or raw in ('.', '..') or '/' in raw or '\0' in raw
            or len(raw) > MAX_NAME):
        raise refuse('<name>', raw, 'is not a valid domain name',
                     AnnotationError)
    return raw


class GuestDomain:
    """A libvirt domain (a guest): the parts of its XML the hook uses."""

    def __init__(self) -> None:
        self.name = ''
        #: The ``<uuid>`` text (:attr:`uuid` is the checked, canonical one).
        self.uuid_raw = ''
        self._uuid: str | None = None
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
        #: Metadata that looks meant for ovs-rdt in another namespace
        #: (``<x:rdt>``, ``<x:l3 ways>``, a namespace like ``urn:ovsrdt:..``):
        #: namespace -> the element, for the hook's warning.
        self.lookalikes: dict[str, str] = {}

    def lookalike_warning(self) -> str | None:
        """Why metadata in another namespace may be an annotation meant for
        ovs-rdt that it does not read (None: nothing looks so).
        """
        if not self.lookalikes:
            return None
        found = '; '.join('<%s> in namespace "%s"' % (show(tag), show(uri, 80))
                          for uri, tag in sorted(self.lookalikes.items()))
        return ('%s looks like an ovs-rdt annotation, but ovs-rdt reads only '
                '<rdt:rdt xmlns:rdt="%s"> in <metadata>: this VM asks ovs-rdt '
                'for nothing and runs in the default group' % (found, RDT_NS))

    @property
    def uuid(self) -> str:
        """The canonical UUID, checked on first use.

        (A VM that asks for nothing starts without it being needed.)
        """
        if self._uuid is None:
            from ovs_rdt.inputs import uuids

            if not self.uuid_raw:
                raise AnnotationError('the domain XML has no <uuid>')
            self._uuid = uuids.parse(self.uuid_raw, '<uuid>')
        return self._uuid

    @property
    def wants_something(self) -> bool:
        """Whether the XML could ask for an allocation (config not read)."""
        return (self.annotation is not None
                or self.flavor_name is not None
                or self.flavor_asks)

    @property
    def flavor_asks(self) -> bool:
        """Whether the flavor's extra specs may hold one of ours.

        A cheap look for the prefixes of
        :func:`ovs_rdt.inputs.request.is_ours` (which decides, when
        :func:`resolve` reads them): a VM asking for nothing does not
        import the rules.
        """
        return any(map(_maybe_ours, self.extra_specs or ()))

    # -- vCPU placement ---------------------------------------------------
    def vcpu_count(self) -> int:
        from ovs_rdt.inputs import integers

        if self.vcpus_raw is None:
            return 1
        return integers.parse(self.vcpus_raw, '<vcpu>', 1, MAX_VCPUS)

    def vcpu_cpus(self) -> frozenset[int] | None:
        """Host CPUs the vCPUs may run on; None means any CPU.

        A ``<vcpupin>`` decides for its vCPU; the others follow ``<vcpu
        cpuset>`` (ignored with ``placement='auto'``, where numad decides).
        """
        from ovs_rdt.inputs import integers

        count = self.vcpu_count()
        pins: dict[int, tuple[str, str]] = {}
        for vcpu_s, cpuset in self.vcpupins_raw:
            vcpu = integers.parse(vcpu_s, '<vcpupin vcpu>', 0, MAX_VCPUS)
            if vcpu < count:
                pins[vcpu] = (cpuset, '<vcpupin vcpu="%s" cpuset>'
                              % show(vcpu_s))
        if len(pins) < count and (self.vcpu_cpuset_raw is None
                                  or self.vcpu_placement == 'auto'):
            return None              # some vCPU may run anywhere
        from ovs_rdt.inputs import cpulists

        bits = 0
        if len(pins) < count:        # some vCPU follows <vcpu cpuset>
            assert self.vcpu_cpuset_raw is not None
            bits = cpulists.parse_bits(self.vcpu_cpuset_raw, '<vcpu cpuset>')
        for cpuset, label in dict(pins.values()).items():  # distinct sets
            bits |= cpulists.parse_bits(cpuset, label)
        return cpulists.to_set(bits)


class _Parser:
    """expat callbacks building a :class:`GuestDomain`."""

    def __init__(self) -> None:
        self.dom = GuestDomain()
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
        if not tag.startswith(_RDT):
            check_namespace(qname, tag.rpartition(_SEP)[0])
        if tag.startswith(_RDT) or self.in_rdt:
            self._rdt_element(tag, {self._resolve(k, scope, False): v
                                    for k, v in attrs.items()}, depth)
            return
        if tag.startswith(NOVA_NS + _SEP) or tag.startswith(NOVA_NS_OLD + _SEP):
            self._nova_element(tag, attrs, depth)
        elif depth <= 3 and not self.in_flavor:
            self._lookalike(qname, tag, attrs, depth)

    def _lookalike(self, qname: str, tag: str, attrs: dict[str, str],
                   depth: int) -> None:
        """Note metadata in another namespace that looks meant for ovs-rdt:
        an ``<x:rdt>`` directly in ``<metadata>``, a namespace whose letters
        spell ovsrdt, or an ``<x:l3 ways>``, ``<x:pool name>``, ``<x:mb
        percent>`` in such an element (:meth:`GuestDomain.lookalike_warning`).
        """
        uri, sep, local = tag.rpartition(_SEP)
        if not sep:             # an unbound prefix: "x:rdt" as written
            uri, local = '(unbound prefix)', qname.rpartition(':')[2]
        letters = ''.join(c for c in uri.lower() if c.isalnum())
        like = 'ovsrdt' in letters or (depth == 2 and local == 'rdt') or (
            depth == 3 and local in _RDT_CHILDREN and any(
                a.rpartition(':')[2] == attr for a in attrs
                for attr, _field in _RDT_CHILDREN[local]))
        if like and len(self.dom.lookalikes) < 3:
            self.dom.lookalikes.setdefault(uri, qname)

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
                '<rdt:l3 ways="N">, <rdt:l3 kib="K">, <rdt:pool name="P">, '
                '<rdt:mb percent="N"> or <rdt:mb mbps="N">)'
                % (show(_pretty(tag)), RDT_NS))
        if local in self.seen_rdt:
            raise AnnotationError('<rdt:%s> appears twice in <rdt:rdt>' % local)
        self.seen_rdt.add(local)
        known = [attr for attr, _field in _RDT_CHILDREN[local]]
        wanted = '" or "'.join(known)
        for attr, value in attrs.items():
            if attr not in known:
                raise AnnotationError(
                    '<rdt:%s %s="%s">: unknown attribute "%s" (<rdt:%s> takes '
                    'only "%s")' % (local, show(_pretty(attr)), show(value),
                                    show(_pretty(attr)), local, wanted))
        given = [attr for attr in known if attr in attrs]
        if not given:
            raise AnnotationError('<rdt:%s>: the "%s" attribute is required'
                                  % (local, wanted))
        assert self.dom.annotation is not None
        # Both of an element's: the request's rule refuses them together.
        for attr in given:
            self.dom.annotation[_annotation_key(
                local, known.index(attr), attr)] = attrs[attr]

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
                    dom.uuid_raw = text.strip()
                elif tag == 'vcpu':
                    dom.vcpus_raw = text.strip()
            elif self.spec_name is not None:
                if dom.extra_specs is None:
                    dom.extra_specs = {}
                name = self.spec_name
                if _maybe_ours(name) and name in dom.extra_specs:
                    raise AnnotationError('flavor extra spec %s is given twice'
                                          % show(name))
                dom.extra_specs[name] = text   # verbatim, as Nova has it
                self.spec_name = None
        if self.in_rdt and depth == 2:
            self.in_rdt = False
        if self.in_flavor == depth:
            self.in_flavor = 0
        stack.pop()
        self.scopes.pop()


def _maybe_ours(key: str) -> bool:
    """Whether an extra spec may be ours (:attr:`GuestDomain.flavor_asks`)."""
    return key.startswith('rdt:') or ':CUSTOM_RDT_' in key


def check_namespace(qname: str, uri: str) -> None:
    """Refuse the element ``qname`` if its namespace ``uri`` looks like
    ours but is not :data:`RDT_NS` (the one rule for a mistyped namespace).
    """
    if uri[:len(RDT_NS_FAMILY)].lower() != RDT_NS_FAMILY or uri == RDT_NS:
        return
    prefix = qname.rpartition(':')[0]
    raise AnnotationError(
        '<%s> is in the namespace "%s", which ovs-rdt does not know: its '
        'annotation\'s namespace is "%s" (%s="%s")'
        % (show(qname), show(uri, 80), RDT_NS,
           'xmlns:' + show(prefix) if prefix else 'xmlns', RDT_NS))


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


def parse(data: bytes) -> GuestDomain:
    """Parse a domain XML; raise AnnotationError (one line) on any fault."""
    # pyexpat is what xml.parsers.expat re-exports; importing it directly
    # spares the hook the xml and xml.parsers packages at every event.
    import pyexpat as expat

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
    dom.name = check_name(dom.name)
    return dom


# -- what the VM asks for ---------------------------------------------------
def _annotation_spec(values: dict[str, str]) -> CacheRequest | None:
    from ovs_rdt.inputs import request

    if not values:
        return None   # an empty <rdt:rdt/>: explicitly nothing
    raw: dict[str, str] = {}
    labels: dict[str, str] = {}
    for element, attrs in _RDT_CHILDREN.items():
        for index, (attr, field) in enumerate(attrs):
            key = _annotation_key(element, index, attr)
            if key in values:
                raw[field] = values[key]
            labels[field] = '<rdt:%s %s>' % (element, attr)
    return request.parse(raw, labels, 'the <rdt:rdt> annotation')


def parse_flavor_mapping(flavor: str, raw: str) -> dict[str, str]:
    """``rdt:l3_ways=3, rdt:mb_percent=50`` (a ``[flavors]`` value)."""
    from ovs_rdt.inputs import keyvalues

    out: dict[str, str] = {}
    for item, key, value in keyvalues.items(raw):
        if value is None or not key:
            raise ConfigError('[flavors] %s = %s: "%s" is not KEY=VALUE '
                              '(e.g. rdt:l3_ways=3)'
                              % (show(flavor), show(raw, 80), show(item)))
        if not key.startswith('rdt:'):
            key = 'rdt:' + key
        if key in out:
            raise ConfigError('[flavors] %s: %s is given twice'
                              % (show(flavor), show(key)))
        out[key] = value
    return out


def resolve(dom: GuestDomain, settings: object | None) -> CacheRequest | None:
    """What the VM asks for, validated against the settings; None: nothing.

    The annotation wins (an empty ``<rdt:rdt/>`` means "nothing", whatever
    the flavor says), then the flavor's extra specs (``rdt:``,
    ``resources:CUSTOM_RDT_*``), then the ``[flavors]`` entry for the
    flavor's name.
    """
    from ovs_rdt.inputs import request

    spec: CacheRequest | None
    if dom.annotation is not None:
        spec = _annotation_spec(dom.annotation)
    elif dom.flavor_asks:
        flavor = show(dom.flavor_name or '?')
        spec = request.from_extra_specs(
            dom.extra_specs, 'flavor %s extra spec ' % flavor,
            source='flavor %s extra specs' % flavor)
    elif dom.flavor_name is not None and settings is not None:
        flavors: dict[str, str] = getattr(settings, 'flavors', {})
        raw = flavors.get(dom.flavor_name)
        if raw is None:
            return None
        source = '[flavors] %s' % show(dom.flavor_name)
        try:
            pairs = parse_flavor_mapping(dom.flavor_name, raw)
            spec = request.from_extra_specs(pairs, source + ' ', source=source)
        except InvalidValue as exc:
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
        request.configured_pool(spec.pool, getattr(settings, 'pools', {}),
                                spec.label(request.POOL))
    return spec
