"""python -m hlo_opt rules list | rules verify"""
from __future__ import annotations

import argparse
import sys

from hlo_opt import rules
from hlo_opt.rules import verify


def _status(numeric: verify.Outcome, formal: verify.Outcome) -> str:
    if numeric.ok and formal.ok:
        return "verified"
    return "FAILED " + "; ".join(f"{kind}: {o.detail}" for kind, o in
                                 (("numeric", numeric), ("z3", formal)) if not o.ok)


def rules_list(report: verify.Report) -> None:
    width = max(len(r.name) for r in rules.ALL)
    for family, members in rules.FAMILIES.items():
        print(f"# {family} ({len(members)})")
        for r in members:
            print(f"{r.name:<{width}}  {r.identity:<58}  {_status(*report.rules[r.name])}")


def rules_verify(report: verify.Report) -> None:
    for r in rules.ALL:
        numeric, formal = report.rules[r.name]
        used = ", ".join(sorted(formal.axioms))
        print(f"{r.name:<28} numeric {'ok' if numeric.ok else 'FAIL':<4} "
              f"z3 {'proven' if formal.ok else 'FAIL':<6} {used if formal.ok else formal.detail}"
              + ("" if numeric.ok else f"  [{numeric.detail}]"))
    print(f"\n{'axiom':<34} {'validated':<10} rules using it")
    uses = report.uses()
    for name, outcome in report.axioms.items():
        print(f"{name:<34} {'yes' if outcome.ok else 'NO':<10} {uses[name]}"
              + ("" if outcome.ok else f"  [{outcome.detail}]"))
    proven = sum(n.ok and f.ok for n, f in report.rules.values())
    print(f"\n{proven}/{len(report.rules)} rules verified (numeric and z3), "
          f"{sum(o.ok for o in report.axioms.values())}/{len(report.axioms)} axioms "
          f"validated, in {report.seconds:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hlo_opt")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("rules", help="the rule library")
    cmd.add_argument("action", choices=["list", "verify"])
    args = parser.parse_args(argv)
    report = verify.check_all(rules.ALL, rules.AXIOMS)
    (rules_list if args.action == "list" else rules_verify)(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
