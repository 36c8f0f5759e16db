"""Print the failed tests of a subunit v2 stream, briefly.

    stestr -u ENV_DIR failing --subunit | python tools/ci_failures.py [LINES]

For each failed test: its id, then the last LINES lines (default 12) of its
traceback. Run by tools/run-tests.sh after a failed run, so that the tail
of the log, which is all a CI report may keep, names what failed and why.
(stestr keeps ``failing`` as subunit v1 on disk; ``--subunit`` gives v2.)

Runs under the environment's own Python (it needs python-subunit and
testtools, which stestr brings).
"""

import sys

import subunit
import testtools


def failing_tests(stream):
    """(test id, traceback text) for each failed test in a subunit stream."""
    found = []

    def on_test(test):
        if test['status'] not in ('fail', 'uxsuccess'):
            return
        details = test.get('details') or {}
        text = ''
        for name in ('traceback', 'reason'):
            if name in details:
                text = details[name].as_text()
                break
        found.append((test['id'], text))

    case = subunit.ByteStreamToStreamResult(stream, non_subunit_name='stdout')
    result = testtools.StreamToDict(on_test)
    result.startTestRun()
    try:
        case.run(result)
    finally:
        result.stopTestRun()
    return found


def main(argv):
    lines = int(argv[1]) if len(argv) > 1 else 12
    tests = failing_tests(sys.stdin.buffer)
    for test_id, text in tests:
        print('FAILED %s' % test_id)
        for line in text.rstrip().splitlines()[-lines:]:
            print('    %s' % line)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
