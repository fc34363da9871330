import os

import pytest

from ovs_rdt import conf, opts
from ovs_rdt.exceptions import ConfigError
from ovs_rdt.inputs import listen

SAMPLE = """
[resctrl]
root = /mnt/rc
[allocation]
pools = hp, noisy
system_min_ways = 3
[pool:hp]
l3_ways = 7
isolated = true
[pool:noisy]
l3_cbm = 0x2
mb_percent = 50
[libvirt]
on_failure = warn
[flavors]
m1.nfv = rdt:l3_ways=3
"""


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / 'ovs-rdt.conf'
    path.write_text(SAMPLE)
    return str(path)


def _flat(settings):
    return (settings.resctrl.root, settings.allocation.pools,
            settings.allocation.system_min_ways,
            {n: p.__dict__ for n, p in settings.pools.items()},
            settings.libvirt.on_failure, settings.flavors)


def test_the_hook_and_the_commands_read_alike(sample):
    light = conf.load(sample)
    cli, _ = opts.load(['--config-file', sample], 'test')
    assert _flat(light) == _flat(cli)
    assert light.pools['hp'].l3_ways == 7 and light.pools['hp'].isolated
    assert light.pools['noisy'].mb_percent == 50
    assert light.flavors == {'m1.nfv': 'rdt:l3_ways=3'}


def test_later_files_and_config_dir_win_option_by_option(sample, tmp_path):
    override = tmp_path / 'override.conf'
    override.write_text('[allocation]\nsystem_min_ways = 4\n')
    confd = tmp_path / 'conf.d'
    confd.mkdir()
    (confd / '20-b.conf').write_text('[resctrl]\nroot = /mnt/b\n')
    (confd / '10-a.conf').write_text('[resctrl]\nroot = /mnt/a\n'
                                     'lock_timeout = 5\n')
    (confd / 'ignored.txt').write_text('[resctrl]\nroot = /nope\n')
    settings, _ = opts.load(['--config-file', sample, '--config-file',
                             str(override), '--config-dir', str(confd)],
                            'test')
    assert settings.allocation.system_min_ways == 4
    assert settings.allocation.pools == ['hp', 'noisy']     # from sample
    assert settings.resctrl.root == '/mnt/b'
    assert settings.resctrl.lock_timeout == 5


def test_cli_config_file_after_the_subcommand_and_debug(sample, tmp_path):
    def add_cli(parser):
        sub = parser.add_subparsers(dest='cmd')
        p = sub.add_parser('x')
        opts.add_config_arguments(p, prefix='sub_')

    settings, args = opts.load(['--debug', 'x', '--config-file', sample],
                               'test', add_cli)
    assert settings.resctrl.root == '/mnt/rc' and settings.default.debug
    assert args.cmd == 'x'


@pytest.mark.parametrize('argv,message', [
    (['--config-file', '/nonexistent/x.conf'],
     'config file /nonexistent/x.conf does not exist'),
    (['--config-dir', '/nonexistent/d'],
     'config directory /nonexistent/d does not exist'),
])
def test_missing_named_files_are_errors(argv, message):
    with pytest.raises(ConfigError, match=message):
        opts.load(argv, 'test')


@pytest.mark.parametrize('section,line,message', [
    ('pool:hp', 'l3_ways = abc',
     r"\[pool:hp\] l3_ways: 'abc' is not a whole number"),
    ('pool:hp', 'l3_ways = 0', r"\[pool:hp\] l3_ways: '0' must be from 1 to 64"),
    ('pool:hp', 'l3_ways = 65', r"l3_ways: '65' must be from 1 to 64"),
    ('pool:hp', 'l3_ways = "\u0663"', r"l3_ways: '\u0663' is not a whole number"),
    ('resctrl', 'lock_timeout = +3', r"\[resctrl\] lock_timeout: '\+3' is not a "
     'whole number'),
    ('pool:noisy', 'mb_percent = 101',
     r"\[pool:noisy\] mb_percent: '101' must be from 1 to 100"),
    ('libvirt', 'on_failure = maybe', "on_failure: 'maybe' is not one of refuse, warn"),
    ('pool:hp', 'isolated = perhaps', "isolated: 'perhaps' is not a boolean"),
    ('metrics', 'listen = 9468', r"\[metrics\] listen: '9468' is not HOST:PORT"),
    ('metrics', 'listen = ::1:9468', "listen: '::1:9468' is not HOST:PORT"),
    ('metrics', 'listen = host:0', "listen: 'host:0' is not HOST:PORT"),
    ('metrics', 'listen = host:65536', "'host:65536' is not HOST:PORT"),
    # int() takes these ports; a whole number is ASCII digits only
    ('metrics', 'listen = host:\u0669\u0664\u0666\u0668', 'is not HOST:PORT'),
    ('metrics', 'listen = host:+80', "'host:\\+80' is not HOST:PORT"),
])
def test_bad_values_name_option_and_value(tmp_path, section, line, message):
    text = SAMPLE + '\n[%s]\n%s\n' % (section, line)
    path = tmp_path / 'bad.conf'
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        conf.load(str(path))


@pytest.mark.parametrize('raw,host,port', [
    ('127.0.0.1:9468', '127.0.0.1', 9468), ('[::1]:9468', '::1', 9468),
    ('localhost:1', 'localhost', 1), (' 0.0.0.0:65535 ', '0.0.0.0', 65535)])
def test_metrics_listen(tmp_path, raw, host, port):
    path = tmp_path / 'm.conf'
    path.write_text('[metrics]\nlisten = %s\n' % raw)
    light = conf.load(str(path))
    cli, _ = opts.load(['--config-file', str(path)], 'test')
    assert light.metrics.listen == cli.metrics.listen == raw.strip()
    assert listen.parse_listen(light.metrics.listen) == (host, port)
    path.write_text('[metrics]\nlisten =\n')
    assert conf.load(str(path)).metrics.listen is None
    assert opts.load(['--config-file', str(path)], 'test')[0] \
        .metrics.listen is None


def test_pool_without_section(tmp_path):
    path = tmp_path / 'c.conf'
    path.write_text('[allocation]\npools = ghost\n')
    with pytest.raises(ConfigError, match="names 'ghost' but there is no "
                       r"\[pool:ghost\] section"):
        conf.load(str(path))


def test_missing_explicit_file():
    # Named and missing: refused, never the defaults (the hook too, see
    # test_hook_wrapper.test_a_missing_config_is_refused_not_defaulted).
    with pytest.raises(ConfigError, match='does not exist'):
        conf.load('/nonexistent/ovs-rdt.conf')
    with pytest.raises(ConfigError, match='config directory /nonexistent/d '
                       'does not exist'):
        conf.config_paths([], ['/nonexistent/d'])


def test_config_paths_order(tmp_path, monkeypatch):
    a, b = tmp_path / 'a.conf', tmp_path / 'b.conf'
    d = tmp_path / 'd'
    d.mkdir()
    for name in ('2.conf', '1.conf', '.hidden.conf', 'x.txt'):
        (d / name).write_text('')
    for f in (a, b):
        f.write_text('')
    assert conf.config_paths([str(b), str(a)], [str(d)]) == [
        str(b), str(a), str(d / '1.conf'), str(d / '2.conf')]
    monkeypatch.setattr(conf, 'DEFAULT_CONFIG_FILE', str(a))
    monkeypatch.setattr(conf, 'DEFAULT_CONFIG_DIR', str(tmp_path / 'no.d'))
    assert conf.config_paths() == [str(a)]
    assert conf.config_paths([], [str(d)]) == [str(d / '1.conf'),
                                               str(d / '2.conf')]
    # Neither named: the default file, then the default directory's files
    # (oslo.config's default_config_dirs), those that exist.
    monkeypatch.setattr(conf, 'DEFAULT_CONFIG_DIR', str(d))
    assert conf.config_paths() == [str(a), str(d / '1.conf'),
                                   str(d / '2.conf')]
    assert conf.config_paths([str(b)]) == [str(b)]
    monkeypatch.setattr(conf, 'DEFAULT_CONFIG_FILE', str(tmp_path / 'no'))
    assert conf.config_paths() == [str(d / '1.conf'), str(d / '2.conf')]
    monkeypatch.setattr(conf, 'DEFAULT_CONFIG_DIR', str(tmp_path / 'no.d'))
    assert conf.config_paths() == []


def test_list_opts_covers_every_declared_option():
    listed = {getattr(g, 'name', g): {o.name for o in group_opts}
              for g, group_opts in opts.list_opts()}
    for section, specs in conf.SPEC.items():
        group = 'pool:NAME' if section == 'pool' else section
        assert listed[group] == {s.name for s in specs}
        assert all(len(s.help) > 10 for s in specs), section


def test_ini_parser_matches_oslo(tmp_path):
    path = tmp_path / 'c.conf'
    path.write_text('[DEFAULT]\ndebug = true\n'
                    '# comment\n; comment\n'
                    '[allocation]\npools: hp,\n  noisy\nsystem_min_ways = 1\n'
                    'system_min_ways = "3"\n'
                    '[pool:hp]\nl3_ways=4\n[pool:noisy]\nl3_cbm = 2\n')
    light = conf.load(str(path))
    assert light.allocation.pools == ['hp', 'noisy']
    assert light.allocation.system_min_ways == 3
    assert light.default.debug is True
    # No DEFAULT inheritance into other sections (oslo has none either).
    assert 'debug' not in vars(light.pools['hp'])


@pytest.mark.parametrize('text,message', [
    ('key = value\n', 'line 1: .* is outside any'),
    ('[resctrl\nroot = /x\n', 'line 1: bad section header'),
    ('[resctrl]\njust a line\n', 'line 2: .* is not "option = value"'),
])
def test_ini_syntax_errors_name_file_and_line(tmp_path, text, message):
    path = tmp_path / 'c.conf'
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        conf.load(str(path))


@pytest.mark.parametrize('text,message', [
    ('[alocation]\npools = hp\n', r'unknown section \[alocation\]'),
    ('[allocation]\npools = hp\n[pool:hp]\nl3_way = 2\n',
     r"unknown option 'l3_way' in \[pool:hp\] \(known: l3_ways, l3_cbm"),
    ('[resctrl]\nrot = /x\n', r"unknown option 'rot' in \[resctrl\]"),
    ('[allocation]\npools = h p\n[pool:h p]\nl3_ways = 1\n',
     r"\[allocation\] pools: 'h p' is not a pool name \(a letter or digit"),
])
def test_typos_are_refused_by_hook_and_commands(tmp_path, text, message):
    path = tmp_path / 'c.conf'
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        conf.load(str(path))
    with pytest.raises(ConfigError, match=message):
        opts.load(['--config-file', str(path)], 'test')


def test_free_form_and_unlisted_pool_sections_are_fine(tmp_path):
    path = tmp_path / 'c.conf'
    path.write_text('[DEFAULT]\nuse_syslog = true\n[flavors]\nm1.any = '
                    'rdt:pool=x\n[pool:spare]\nl3_ways = 1\n')
    assert conf.load(str(path)).flavors == {'m1.any': 'rdt:pool=x'}


def test_unlisted_pool_section_is_a_warning_not_an_error(tmp_path):
    # Before, [pool:noisy] without noisy in pools was ignored without a word.
    first, second = tmp_path / 'a.conf', tmp_path / 'b.conf'
    first.write_text('[allocation]\npools = hp\n[pool:hp]\nl3_ways = 2\n')
    second.write_text('[pool:noisy]\nl3_ways = 1\n[pool:hp]\nisolated = 1\n')
    settings = conf.load_files([str(first), str(second)])
    assert list(settings.pools) == ['hp']
    assert settings.warnings == [
        'config file %s: [pool:noisy] is ignored: noisy is not in '
        '[allocation] pools (hp), so there is no group ovsrdt-pool-noisy '
        '(one left from before is removed, its tasks moved to the default '
        'group); add noisy to pools to use the pool, or remove or comment '
        'out the section' % second]
    first.write_text('[pool:hp]\nl3_ways = 2\n')
    assert 'pools (empty)' in conf.load(str(first)).warnings[0]
    first.write_text('[allocation]\npools = hp\n[pool:hp]\nl3_ways = 2\n')
    assert conf.load(str(first)).warnings == []


def three_files(tmp_path):
    """Issue 51 item 3: three conf.d files set one pool's ways, 4, 3, 5."""
    main = tmp_path / 'ovs-rdt.conf'
    main.write_text('[allocation]\npools = hp\n')
    confd = tmp_path / 'ovs-rdt.conf.d'
    confd.mkdir()
    (confd / '10-a.conf').write_text('[pool:hp]\nl3_ways = 4\n')
    (confd / '20-b.conf').write_text('# b\n[pool:hp]\nl3_ways = 3\n')
    (confd / '30-c.conf').write_text('[pool:hp]\nisolated = true\n'
                                     'l3_ways = 5\n')
    return main, confd


def test_a_later_file_overriding_a_pool_is_a_warning(tmp_path):
    main, confd = three_files(tmp_path)
    settings = conf.load_files(conf.config_paths([str(main)], [str(confd)]))
    assert settings.pools['hp'].l3_ways == 5
    assert settings.warnings == [
        'config file {d}/30-c.conf line 3: [pool:hp] l3_ways = 5 overrides '
        '4 in {d}/10-a.conf line 2, 3 in {d}/20-b.conf line 3: the last '
        'file read wins ("ovs-rdt config" shows every value and where it '
        'comes from)'.format(d=confd)]
    assert [(s.path, s.line, s.value) for s in
            settings.sources[('pool:hp', 'l3_ways')]] == [
        (str(confd / '10-a.conf'), 2, '4'), (str(confd / '20-b.conf'), 3, '3'),
        (str(confd / '30-c.conf'), 3, '5')]
    # The same value again, or another section: no warning.
    (confd / '20-b.conf').write_text('[pool:hp]\nl3_ways = 5\n')
    (confd / '10-a.conf').write_text('[allocation]\npools = hp\n')
    assert conf.load_files(conf.config_paths(
        [str(main)], [str(confd)])).warnings == []
    # A pool [allocation] pools does not list (issue 51 trial 12): one
    # warning naming every file its section is in, none for its overrides.
    main.write_text('[allocation]\npools =\n')
    (confd / '10-a.conf').write_text('[pool:hp]\nl3_ways = 4\n')
    [warning] = conf.load_files(conf.config_paths(
        [str(main)], [str(confd)])).warnings
    assert warning.startswith(
        'config files {d}/10-a.conf, {d}/20-b.conf, {d}/30-c.conf: '
        '[pool:hp] is ignored: hp is not in [allocation] pools (empty)'
        .format(d=confd)), warning


def test_fingerprint_and_changes_say_which_file_changed(tmp_path):
    main, confd = three_files(tmp_path)
    paths = conf.config_paths([str(main)], [str(confd)])
    settings = conf.load_files(paths)
    assert conf.fingerprint(paths) == settings.digests
    assert conf.changes(settings.digests, conf.fingerprint(paths)) == []
    (confd / '20-b.conf').write_text('# b\n[pool:hp]\nl3_ways = 2\n')
    (confd / '40-d.conf').write_text('')
    os.unlink(confd / '10-a.conf')
    now = conf.fingerprint(conf.config_paths([str(main)], [str(confd)]))
    assert conf.changes(settings.digests, now) == [
        '%s changed' % (confd / '20-b.conf'), '%s is new' % (
            confd / '40-d.conf'), '%s is gone' % (confd / '10-a.conf')]


def test_config_shows_each_value_and_where_it_comes_from(
        tmp_path, capsys, monkeypatch):
    import json

    from ovs_rdt.cmd import main as cli
    main, confd = three_files(tmp_path)
    # Trial 8: the header names the options given, and a variable they
    # replace.
    monkeypatch.setenv('OVS_RDT_CONF', str(main))
    assert cli.main(['--config-dir', str(confd), 'config']) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        'Files read (--config-dir; $OVS_RDT_CONF is set, and not read when '
        'either is given), in this order (a later value wins):')
    monkeypatch.delenv('OVS_RDT_CONF')
    args = ['--config-file', str(main), '--config-dir', str(confd)]
    assert cli.main(args + ['config']) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[:5] == [
        'Files read (--config-file and --config-dir), in this order (a '
        'later value wins):', '  %s' % main] + [
        '  %s' % (confd / n) for n in ('10-a.conf', '20-b.conf', '30-c.conf')]
    [ways] = [ln for ln in lines if ln.startswith('l3_ways = ')]
    assert ways.split('  # ') == [
        'l3_ways = 5'.ljust(len(ways.split('  # ')[0])),
        '{d}/30-c.conf:3 (overrides 3 at {d}/20-b.conf:3, 4 at '
        '{d}/10-a.conf:2)'.format(d=confd)]
    assert [ln for ln in lines if ln.startswith('system_min_ways = 2 ')
            ][0].endswith('# default')
    assert 'warning: config file %s/30-c.conf line 3: [pool:hp] l3_ways' \
        % confd in err
    assert cli.main(args + ['config', '--json']) == 0
    data = json.loads(capsys.readouterr().out)
    [item] = [i for i in data['options'] if i['section'] == 'pool:hp' and
              i['option'] == 'l3_ways']
    assert (item['value'], item['file'], item['line']) == (
        '5', str(confd / '30-c.conf'), 3)
    assert [o['value'] for o in item['overrides']] == ['4', '3']


def test_each_section_type_names_its_options_as_declared():
    """The section classes the type checker reads (conf.SECTIONS) hold
    exactly the options of SPEC, and every option's type is in TYPES.
    """
    for section, specs in conf.SPEC.items():
        declared = conf.SECTIONS[section].__annotations__
        assert list(declared) == [o.name for o in specs], section
        assert all(o.type in conf.TYPES for o in specs), section
    assert set(conf.SECTIONS) == set(conf.SPEC)
