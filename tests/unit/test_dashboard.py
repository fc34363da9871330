"""etc/grafana/ovs-rdt-dashboard.json queries only what the agent exports."""
import json
import os
import re

from ovs_rdt.agent.metrics import ResctrlCollector

PATH = os.path.join(os.path.dirname(__file__), '..', '..', 'etc', 'grafana',
                    'ovs-rdt-dashboard.json')


def exported() -> dict[str, set[str]]:
    """Sample name -> label names, as the collector exposes them."""
    out = {}
    for family in ResctrlCollector._families().values():
        suffix = '_total' if family.type == 'counter' else ''
        out[family.name + suffix] = set(family._labelnames)
    return out


def test_every_query_names_exported_metrics_and_labels():
    with open(PATH) as fh:
        dash = json.load(fh)
    metrics = exported()
    used = set()
    queries = [t for p in dash['panels'] for t in p['targets']]
    queries += [{'expr': v['query']['query'], 'legendFormat': ''}
                for v in dash['templating']['list'] if v['type'] == 'query']
    for target in queries:
        names = set(re.findall(r'ovs_rdt_[a-z0-9_]+', target['expr']))
        assert names and names <= set(metrics), target['expr']
        used |= names
        labels = set.union(*(metrics[n] for n in names)) | {'instance'}
        for label in re.findall(r'(\w+)=~?"', target['expr']) + \
                re.findall(r'{{(\w+)}}', target.get('legendFormat', '')):
            assert label in labels, (label, target['expr'])
    # Occupancy, bandwidth, ways over time, policy decisions (issue 12).
    assert {'ovs_rdt_llc_occupancy_bytes', 'ovs_rdt_mbm_total_bytes_total',
            'ovs_rdt_l3_ways', 'ovs_rdt_policy_decisions_total'} <= used
    # Counters only through rate()/increase(): resets are theirs to handle.
    for target in queries:
        for name in re.findall(r'ovs_rdt_[a-z0-9_]+_total', target['expr']):
            assert re.search(r'(rate|increase)\(%s' % name, target['expr'])
    ds = [p['datasource'] for p in dash['panels']]
    assert all(d == {'type': 'prometheus', 'uid': '${datasource}'} for d in ds)
