import sys; sys.path.insert(0,'.')
from fuzz.targets import lookup
from fuzz.execute import run_example
from hypothesis import given, settings, strategies as st, HealthCheck
import collections
dev = sys.argv[1].split(",") if len(sys.argv) > 1 else ["cpu"]
for t in lookup([]):
    for contract in ("caller","wide"):
        c=collections.Counter()
        @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(t.input_model().specs(dev, contract))
        def f(spec):
            r=run_example(t, spec)
            key=(r.verdict.value, r.legacy.raised.type_name if r.legacy.raised else None, r.optimized.raised.type_name if r.optimized.raised else None, r.legacy.syncs, r.optimized.syncs)
            if key not in c: print(t.name, contract, key, spec if r.verdict.failed else "", [m.detail[:300] for m in r.mismatches], r.legacy.raised, r.optimized.raised)
            c[key]+=1
        f()
        print(t.name, contract, dict(c))
