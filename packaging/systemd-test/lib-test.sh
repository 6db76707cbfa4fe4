#!/bin/sh
# lib-test.sh — lib.sh's runner and assertions, on this machine (run.sh
# runs it before booting a guest): check lines and counts, fail-fast
# within a testcase, the next testcase after a failure, a testcase that
# dies without a FAIL line, the filter, --always, a filter that matches
# nothing, the list mode. Exit status 0 when lib.sh behaves.
here=$(cd "$(dirname "$0")" && pwd)
SYSTEMD_TEST_DIR=$(mktemp -d "${TMPDIR:-/tmp}/systemd-test-lib.XXXXXX")
trap 'rm -rf "$SYSTEMD_TEST_DIR"' EXIT
export SYSTEMD_TEST_DIR
bad=0
# guest MATCH: a guest script's run with SCHEDPOLICYD_TEST_MATCH=MATCH.
guest() {
	SCHEDPOLICYD_TEST_MATCH=$1 sh -c '
		set -u
		. "$0"
		testcase_setup() { check setup; assert_eq "$(echo 1)" 1; pass setup; }
		testcase_two() { check two-a; assert_in "^b" "$(printf "a\nb\n")"; pass two-a; check two-b; assert_eq 1 2; pass two-b-unreached; }
		testcase_three() { skip three "none here"; check three; assert_rc 3 sh -c "exit 3"; assert_false false; pass three; }
		testcase_dies() { echo "$undefined_variable"; }
		testcase_end() { pass end; }
		run_testcases --always setup two three dies --always end' "$here/lib.sh" 2>/dev/null
}
# expect WHAT OUTPUT LINE...: every LINE is a line of OUTPUT.
expect() {
	e_what=$1 e_out=$2
	shift 2
	for e_l in "$@"; do
		printf '%s\n' "$e_out" | grep -qxF -- "$e_l" && continue
		echo "lib-test: FAIL $e_what: no line '$e_l' in:"
		printf '%s\n' "$e_out" | sed 's/^/  /'
		bad=1
	done
}
out=$(guest '')
expect "all" "$out" "systemd-test: PASS setup" "systemd-test: PASS two-a" \
	"systemd-test: FAIL two-b: expected '2', found '1'" "systemd-test: SKIP three: none here" "systemd-test: PASS three" \
	"systemd-test: FAIL testcase_dies: ended with exit 2 and no FAIL line" "systemd-test: PASS end" \
	"systemd-test: DONE pass=4 fail=2 skip=1"
printf '%s\n' "$out" | grep -q 'two-b-unreached' && { echo "lib-test: FAIL a failed assertion did not end its testcase"; bad=1; }
out=$(guest 'thr')
expect "filter" "$out" "systemd-test: not run: testcase_two (SCHEDPOLICYD_TEST_MATCH=thr)" "systemd-test: DONE pass=3 fail=0 skip=1"
out=$(guest 'nothing')
expect "no match" "$out" "systemd-test: FAIL SCHEDPOLICYD_TEST_MATCH: 'nothing' matches no testcase here" "systemd-test: DONE pass=2 fail=1 skip=0"
out=$(SYSTEMD_TEST_LIST=1 guest 'two|dies')
expect "list" "$out" "testcase_two" "testcase_dies"
[ "$(printf '%s\n' "$out" | wc -l)" = 2 ] || { echo "lib-test: FAIL list: $out"; bad=1; }
[ "$bad" = 0 ] && echo "lib-test: ok"
exit "$bad"
