"""Write benchmarks/archive/INDEX.md: every archived run, its commits and the docs sections that cite it."""
import json,re,glob
from pathlib import Path
root=Path(__file__).resolve().parents[2]; arch=root/'benchmarks/archive'
docs=sorted(glob.glob(str(root/'docs/*.md')))+[str(root/'README.md')]
texts={Path(d).name:Path(d).read_text() for d in docs}
def cited(rel):
    out=[]
    for name,t in texts.items():
        head=None
        for line in t.splitlines():
            if line.startswith('#'): head=line.lstrip('#').strip()
            if f"archive/{rel}" in line:
                h=f"{name} ({head})" if head else name
                if h not in out: out.append(h)
    return out
def entries():
    for p in sorted(arch.iterdir()):
        if p.name=='INDEX.md': continue
        if p.is_dir() and p.name in ('load','step_breakdown','compiled_cpu','multi','host_overhead'):
            subs=[q for q in sorted(p.iterdir()) if q.is_dir()]
            loose=[q for q in sorted(p.iterdir()) if q.is_file()]
            yield p, loose
            for q in subs: yield q, None
        else: yield p, None
rows=[]
for p,loose in entries():
    rel=str(p.relative_to(arch))
    files=[p] if p.is_file() else (loose if loose is not None else [q for q in p.rglob('*') if q.is_file()])
    commits=set(); cmds=[]
    for f in files:
        if f.suffix=='.json':
            try: m=json.loads(f.read_text()).get('meta',{})
            except Exception: continue
            if isinstance(m,dict) and m.get('git_commit'):
                c=m['git_commit']; commits.add(c[:7]+(' + changes' if '+ changes' in c else ''))
    kinds=sorted({f.suffix.lstrip('.') for f in files})
    where=cited(rel+('/' if p.is_dir() else ''))
    if not where: where=cited(rel)
    rows.append(f"| `{rel}{'/' if p.is_dir() else ''}` | {len(files)} ({', '.join(kinds)}) | {', '.join(sorted(commits)) or 'not recorded'} | {'; '.join(where[:3]) or '-'} |")
HEADER = """# The archive of past runs

Every benchmark run, A/B experiment and log that earlier versions of ladref were measured with,
kept as they were written (each JSON file's ``meta`` holds its command, machine, versions and
commit). None of them measured the current code: **the current results are in
``benchmarks/results/``** (``python benchmarks/current.py``; docs/benchmarks.md shows them).
[docs/benchmarks_history.md](../../docs/benchmarks_history.md) tells these runs' story in order.

A commit marked "+ changes" measured that commit with edits that were never committed: such a
figure cannot be reproduced exactly from the history. "not recorded": the run predates commit stamps.
A/B scripts (``*.py``, ``*.sh``) sit beside the logs they wrote.

Regenerate this index: ``python benchmarks/archive/index.py``.

| folder or file | files | commits measured | cited by (page, section) |
|---|---|---|---|
"""
(arch / "INDEX.md").write_text(HEADER + "\n".join(rows) + "\n", encoding="utf-8")
print(f"wrote {arch / 'INDEX.md'}: {len(rows)} entries")
