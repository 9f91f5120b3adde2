"""Count how often one `fuzz run` process builds the target registry (and binds sides)."""
import sys, tempfile
import fuzz.targets as t
import fuzz.releases.sides as sides
counts = {"registry builds": 0, "bind": 0}
inner = getattr(t, "_registry", None)
if inner is not None:  # after: the registry is built by _registry, once per module set
    def counting(*a, **k):
        counts["registry builds"] += 1
        return inner(*a, **k)
    t._registry = counting
else:  # before: every all_targets call builds it
    orig = t.all_targets
    def counting_all(*a, **k):
        counts["registry builds"] += 1
        return orig(*a, **k)
    t.all_targets = counting_all
bind = sides.bind
def counting_bind(*a, **k):
    counts["bind"] += 1
    return bind(*a, **k)
sides.bind = counting_bind
from fuzz.cli import main
d = tempfile.mkdtemp()
code = main(["run", "--target", "fla-chunk-offsets", "--target", "fla-chunk-indices", "--device", "cpu",
             "--max-examples", "5", "--in-process", "--quiet", "--confirm", "0", "--corpus", d + "/c",
             "--known-issues", "known-issues.json", "--report", d + "/r.json"] + sys.argv[1:])
print("exit", code, counts, file=sys.stderr)
