#!/usr/bin/env bash
# Runs every Go test (unit, BPF_PROG_TEST_RUN, network namespaces) verbosely into out/test.log,
# prints the package verdicts and any failure, and ends with "tests: N passed, N failed, N skipped".
# Fails when a test fails, when no test ran at all, or under CI (CI set) when any test was
# skipped: CI cannot pass by running nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p out
log=out/test.log
go test -count=1 -p 2 -timeout 25m -v ./... >"$log" 2>&1
status=$?

grep -E '^(ok|FAIL|\?)\s' "$log"
grep -E -e '^\s*--- SKIP' "$log" | sed 's/^\s*/skipped: /' || true
if [ $status -ne 0 ]; then
  echo "---- failures (full log: $log) ----"
  grep -E -B2 -A30 -e '^\s*--- FAIL' -e '^panic:' "$log" | head -400
  # A failing test's own messages can sit far above its "--- FAIL" line, among the daemons'
  # logs it printed: show, per failing test, the lines its assertions wrote.
  for t in $(grep -oE '^--- FAIL: \S+' "$log" | awk '{print $3}' | sort -u); do
    echo "---- $t: what its assertions said ----"
    awk -v t="$t" '
      $0 == "=== RUN   " t || index($0, "=== RUN   " t "/") == 1 { on = 1 }
      on && $0 ~ /_test\.go:[0-9]+: / { say = 1 }
      on && say && $0 !~ /level=/ && $0 !~ /^(===|---) / { print }
      on && $0 !~ /^        / && $0 !~ /_test\.go:[0-9]+: / { say = 0 }
      index($0, "--- FAIL: " t " ") == 1 { on = 0 }
    ' "$log" | head -80
  done
fi

passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
skipped=$(grep -cE '^\s*--- SKIP' "$log")
echo "tests: $passed passed, $failed failed, $skipped skipped" | tee out/tests-summary
if [ "$passed" -eq 0 ]; then
  echo "no test ran" >&2
  exit 1
fi
if [ -n "${CI:-}" ] && [ "$skipped" -gt 0 ]; then
  echo "CI is set and $skipped tests were skipped (listed above): failing" >&2
  exit 1
fi
exit $status
