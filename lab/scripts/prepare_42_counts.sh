#!/bin/bash
# Issue #42 item 3 (prepare): call sites in fuzz/ of what binds a target, looks targets up, checks a run, and
# replay's own channel. Usage: bash lab/scripts/prepare_42_counts.sh CHECKOUT (lab/cpu-runs/2026-12-06-prepare-42.md).
cd "$1"
c() { printf "%-50s %s\n" "$1" "$(eval "$2" | wc -l)"; }
calls() { grep -rn --include=*.py -e "$1" ${2:-fuzz} | grep -v "def \|import" ; }
c "bind_sides( calls" "calls 'bind_sides('"
c "with_upstream( calls" "calls 'with_upstream('"
c "sync_rule( calls (per target or per example)" "calls '[^_.]sync_rule('"
c "lookup(/all_targets( in cli.py, run/, engine/" "calls '\blookup(\|all_targets(' 'fuzz/cli.py fuzz/run fuzz/engine'"
c "check_workers( calls" "calls 'check_workers('"
c "parse_shard( calls" "calls 'parse_shard('"
c "run-config validations (.validate()/_validate_run)" "calls '\.validate()\|_validate_run('"
c "replay marker-line uses" "calls '_RESULT_MARK\|_STARTED_MARK'"
c "watchdog STARTUP_ALLOWANCE definitions" "grep -rn --include=*.py '^STARTUP_ALLOWANCE = ' fuzz"
c "watchdog loops (deadline/limit on child answers)" "grep -rn --include=*.py 'def _wait_for_result\|limit = config.example_timeout if started\|def watch(' fuzz"
c "python child Popen sites" "calls 'subprocess.Popen(\[sys.executable'"
