#!/usr/bin/env python3
"""graph_diff.py - `npusanctl analyze` against graph_model.py, on random
small traces of version 1 and version 2 (graph capture and replay).

    graph_diff.py --npusanctl PATH [--seed N] [--count N] [--v1-only]
                  [--keep DIR] [--expected DIR] [--check FILE...]

Trace i comes from random.Random(seed * 1000003 + i): a run is
reproducible from its seed and count. Traces are analysed 200 to a run of
npusanctl, each with its own `process pid=i` line so that the findings can be
told apart. For each trace both sides are compared twice:

- every occurrence (`--every`): (kind, ptr, alloc ptr, size, stream and
  stack, access and previous stream/seq/type/op/stack/graph, detected_at),
  as multisets and then in order;
- deduplicated: (findings.md's key, count) as multisets, then each row as
  above in order.

On a mismatch the trace is shrunk (lines dropped while the mismatch
stays), printed with both sides' findings, and the run exits 1.
`--check FILE...` compares the two on the given traces instead.
`--expected DIR` first checks that the model still gives DIR/NAME.trace's
NAME.expected.json (hand-checked findings), and, unless --v1-only, that
npusanctl gives the same as the model on them.

Exit status: 0 all equal, 1 a mismatch, 2 usage or harness error, 77 when
npusanctl refuses version 2 traces and the run was not --v1-only.
"""
import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import graph_model  # noqa: E402

BATCH = 200
OPS = ['aten::add', 'aten::mm', 'copy_', 'fill_']


# ------------------------------------------------------------- generation

class Gen:
    """One random trace. Addresses are 0x1000 + [0, 0x300): allocations
    and accesses overlap, run into each other and reuse addresses."""

    def __init__(self, rng, v2):
        self.r, self.v2 = rng, v2
        self.lines = []
        self.live = []          # (ptr, size) as the generator believes
        self.capturing = {}     # origin stream -> graph
        self.members = {}       # stream -> graph it captures into
        self.used = {}          # graph -> [(read, write)] it captured
        self.last_lists = ('', '')
        self.streams = [0, 1, 2, 3]

    def ptr(self):
        return 0x1000 + self.r.randrange(0, 0x300, self.r.choice([1, 8, 0x40]))

    def rng_list(self, k):
        out = []
        for _ in range(k):
            if self.live and self.r.random() < 0.6:
                p, sz = self.r.choice(self.live)
                off = self.r.choice([0, 0, self.r.randrange(max(sz, 1))])
                p += off
            else:
                p = self.ptr()
            ln = self.r.choice([1, 4, 16, 0x40, 0x80])
            out.append('0x%x' % p if ln == 1 and self.r.random() < 0.5
                       else '0x%x+%d' % (p, ln))
        return ','.join(out)

    def st(self):
        return ' stack=%d' % self.r.randint(1, 2) \
            if self.r.random() < 0.4 else ''

    def s(self):
        return self.r.choice(self.streams)

    def e(self):
        return self.r.randint(1, 3)

    def launch(self, s, rd=None, wr=None):
        if rd is None:
            rd = self.rng_list(self.r.choice([0, 1, 1, 2, 3]))
            wr = self.rng_list(self.r.choice([0, 1, 1, 2]))
            self.last_lists = (rd, wr)
        f = 'launch stream=%d op=%s' % (s, self.r.choice(OPS))
        if rd:
            f += ' read=' + rd
        if wr:
            f += ' write=' + wr
        return f + self.st()

    def alloc(self):
        p = self.ptr()
        size = self.r.choice([0, 1, 16, 0x40, 0x100])
        f = 'alloc ptr=0x%x size=%d' % (p, size)
        if self.r.random() < 0.85:
            f += ' stream=%d' % self.s()
        if self.v2 and self.r.random() < 0.25:
            f += ' graph=%d' % self.r.randint(1, 3)
        self.live = [(q, z) for q, z in self.live
                     if q + max(z, 1) <= p or p + max(size, 1) <= q]
        self.live.append((p, size))
        return f + self.st()

    def free(self):
        if self.live and self.r.random() < 0.85:
            p, _ = self.live.pop(self.r.randrange(len(self.live)))
        else:
            p = self.ptr()
        return 'free ptr=0x%x' % p + self.st()

    def v1_op(self):
        r, s = self.r.random(), self.s()
        table = [
            (0.34, lambda: self.launch(s)),
            (0.08, lambda: 'stream_wait stream=%d on=%d' % (s, self.s())),
            (0.07, lambda: 'event_record event=%d stream=%d' % (self.e(), s)),
            (0.07, lambda: 'event_wait event=%d stream=%d' % (self.e(), s)),
            (0.02, lambda: 'event_sync event=%d' % self.e()),
            (0.03, lambda: 'stream_sync stream=%d' % s),
            (0.01, lambda: 'device_sync'),
            (0.02, lambda: 'event_create event=%d' % self.e()),
            (0.01, lambda: 'event_destroy event=%d' % self.e()),
            (0.01, lambda: 'stream_create stream=%d' % s),
            (0.10, self.alloc),
            (0.08, self.free),
            (0.04, lambda: 'record_stream ptr=%s stream=%d' % (
                self.rng_list(1).split('+')[0], s)),
            (0.02, lambda: 'flush'),
            (0.01, lambda: 'gap' if self.r.random() < 0.5 else 'gap lost=2'),
        ]
        for w, fn in table:
            r -= w
            if r < 0:
                return fn()
        return self.launch(s)

    def v2_op(self):
        r, s, g = self.r.random(), self.s(), self.r.randint(1, 3)
        if r < 0.02:
            return 'capture_begin stream=%d graph=%d' % (s, g)
        if r < 0.10 and self.capturing_pairs():
            o, cg = self.r.choice(self.capturing_pairs())
            return 'capture_end stream=%d graph=%d' % (o, cg)
        if r < 0.11:
            return 'capture_end stream=%d graph=%d' % (s, g)
        if r < 0.17:
            return 'graph_replay graph=%d stream=%d' % (g, s)
        if r < 0.18:
            return 'graph_destroy graph=%d' % g
        if r < 0.195:
            return 'gap'
        return self.v1_op()

    def capture_block(self):
        """A capture with its joins: the origin's work, streams joining by
        event or stream_wait, work on them, mostly joined back, host
        operations and replays of other graphs in between."""
        r, g = self.r, r_graph(self.r)
        origin = self.s()
        members, used = [origin], []
        out = ['capture_begin stream=%d graph=%d' % (origin, g)]
        for _ in range(r.randint(1, 9)):
            x = r.random()
            t = r.choice(members)
            if x < 0.4:
                out.append(self.launch(t))
                used.append(self.last_lists)
            elif x < 0.6:
                new = r.choice([u for u in self.streams if u != t] or [t])
                if r.random() < 0.5:
                    e = self.e()
                    out.append('event_record event=%d stream=%d' % (e, t))
                    out.append('event_wait event=%d stream=%d' % (e, new))
                else:
                    out.append('stream_wait stream=%d on=%d' % (new, t))
                if new not in members:
                    members.append(new)
            elif x < 0.7:
                out.append(r.choice([self.alloc, self.free])())
            elif x < 0.78:
                out.append('graph_replay graph=%d stream=%d'
                           % (r_graph(r), t))
            elif x < 0.84:
                out.append(r.choice(['stream_sync stream=%d' % t,
                                     'device_sync',
                                     'event_sync event=%d' % self.e()]))
            else:
                out.append(self.v1_op())
        for t in members[1:]:
            if r.random() < 0.7:
                if r.random() < 0.5:
                    e = self.e()
                    out.append('event_record event=%d stream=%d' % (e, t))
                    out.append('event_wait event=%d stream=%d' % (e, origin))
                else:
                    out.append('stream_wait stream=%d on=%d' % (origin, t))
        x = r.random()
        if x < 0.85:
            out.append('capture_end stream=%d graph=%d' % (origin, g))
            if used:
                self.used[g] = used
        elif x < 0.93:
            out.append('graph_destroy graph=%d' % g)
        return out

    def replay_block(self):
        """A replay with eager work around it, sometimes ordered."""
        r, g, s = self.r, r_graph(self.r), self.s()
        if self.used and r.random() < 0.8:
            g = r.choice(sorted(self.used))
        out = []
        if r.random() < 0.3:
            out.append(r.choice([self.free, self.alloc])())
        elif r.random() < 0.3:
            out.append(self.drop_used(g))
        if r.random() < 0.1:
            out.append('gap')
        out.append('graph_replay graph=%d stream=%d' % (g, s))
        if r.random() < 0.2:
            out.append(self.drop_used(g))
        t = self.s()
        if r.random() < 0.5:
            out.append('stream_wait stream=%d on=%d' % (t, s))
        if g in self.used and r.random() < 0.6:
            rd, wr = r.choice(self.used[g])
            out.append(self.launch(t, *r.choice([(wr, rd), (rd, wr)])))
        else:
            out.append(self.launch(t))
        return out

    def drop_used(self, g):
        """Frees (or allocates over) an allocation that graph g used,
        when the generator can tell one, else any."""
        starts = [int(x.split('+')[0], 16) for rd, wr in self.used.get(g, [])
                  for x in (rd + ',' + wr).split(',') if x]
        hit = [(p, z) for p, z in self.live
               if any(p <= x < p + max(z, 1) for x in starts)]
        if not hit or self.r.random() < 0.2:
            return self.free()
        p, z = self.r.choice(hit)
        if self.r.random() < 0.7:
            self.live.remove((p, z))
            return 'free ptr=0x%x' % p
        self.live = [(q, y) for q, y in self.live if (q, y) != (p, z)]
        self.live.append((p + 8, 64))
        return 'alloc ptr=0x%x size=64 stream=%d' % (p + 8, self.s())

    def capturing_pairs(self):
        return sorted(self.capturing.items())

    def note(self, line):
        """Tracks which streams capture what, only to steer the choices
        (capture_end mostly names an active capture)."""
        w = line.split()
        f = dict(x.split('=', 1) for x in w[1:] if '=' in x)
        if w[0] == 'capture_begin':
            s, g = int(f['stream']), int(f['graph'])
            if s not in self.members and g not in self.capturing.values():
                self.capturing[s] = g
                self.members[s] = g
        elif w[0] == 'capture_end':
            s, g = int(f['stream']), int(f['graph'])
            if self.capturing.get(s) == g:
                del self.capturing[s]
                self.members = {t: h for t, h in self.members.items()
                                if h != g}
        elif w[0] in ('gap', 'graph_destroy'):
            gone = None if w[0] == 'gap' else int(f['graph'])
            self.capturing = {t: h for t, h in self.capturing.items()
                              if gone is not None and h != gone}
            self.members = {t: h for t, h in self.members.items()
                            if gone is not None and h != gone}

    def trace(self, pid, nops):
        self.lines = ['npusan-trace %d' % (2 if self.v2 else 1),
                      'process pid=%d' % pid,
                      'stack id=1 frame="a.py:1 in f"',
                      'stack id=2 frame="b.py:2 in g" frame="main.py:9"']
        while len(self.lines) < nops + 4:
            x = self.r.random()
            if not self.v2:
                block = [self.v1_op()]
            elif x < 0.12 and not self.capturing:
                block = self.capture_block()
            elif x < 0.24:
                block = self.replay_block()
            else:
                block = [self.v2_op()]
            for line in block:
                if self.v2:
                    self.note(line)
                self.lines.append(line)
        return self.lines


def r_graph(rng):
    return rng.randint(1, 3)


def make_trace(seed, i, v2, pid):
    rng = random.Random(seed * 1000003 + i)
    return Gen(rng, v2).trace(pid, rng.randint(10, 45))


# -------------------------------------------------------------- comparing

def _acc(a):
    if a is None:
        return None
    return (a['stream'], a['seq'], a['type'], a['op'], tuple(a['stack']),
            a.get('graph'))


def every_tuple(fd):
    al = fd['alloc']
    return (fd['kind'], fd['ptr'],
            None if al is None else (al['ptr'], al['size'], al['stream'],
                                     tuple(al['stack'])),
            _acc(fd['access']), _acc(fd['previous']), fd['detected_at'])


def dedup_tuple(fd):
    for a in (fd['access'], fd['previous']):
        if a is not None:
            a.setdefault('graph', None)
    return (graph_model.dedup_key(fd), fd['count'])


def multiset(items):
    return collections.Counter(repr(x) for x in items)


def run_engine(ctl, paths, every):
    cmd = [ctl, 'analyze', '--json'] + (['--every'] if every else []) + paths
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode == 2:
        return None, p.stderr
    by_pid = collections.defaultdict(list)
    for line in p.stdout.splitlines():
        fd = json.loads(line)
        by_pid[fd['process']['pid']].append(fd)
    return by_pid, p.stderr


def model_findings(text, every):
    return graph_model.analyze_text(text, dedup=not every)


def differs(eng_every, eng_dedup, text):
    """None when the engine's findings equal the model's, else a message.
    Findings are compared as multisets first (the message then says which
    side has which), then in order: findings.md prints them in detection
    order, and a deduplicated row shows its first occurrence."""
    me = model_findings(text, True)
    md = model_findings(text, False)
    ea, ma = [every_tuple(f) for f in eng_every], [every_tuple(f) for f in me]
    a, b = multiset(ea), multiset(ma)
    if a != b:
        return 'every: engine only %s\n       model only %s' % (
            list((a - b).elements()), list((b - a).elements()))
    if ea != ma:
        return 'every: the same findings in a different order'
    a, b = multiset(map(dedup_tuple, eng_dedup)), \
        multiset(map(dedup_tuple, md))
    if a != b:
        return 'dedup: engine only %s\n       model only %s' % (
            list((a - b).elements()), list((b - a).elements()))
    ea = [every_tuple(f) + (f['count'],) for f in eng_dedup]
    if ea != [every_tuple(f) + (f['count'],) for f in md]:
        return 'dedup: rows in a different order or another occurrence shown'
    return None


def check_one(ctl, lines, tmp):
    """Message when this one trace differs, None when equal or the engine
    refuses it (not a mismatch to shrink towards)."""
    path = os.path.join(tmp, 'shrink.trace')
    with open(path, 'w') as fh:
        fh.write('\n'.join(lines) + '\n')
    ev, _ = run_engine(ctl, [path], True)
    dd, _ = run_engine(ctl, [path], False)
    if ev is None or dd is None:
        return None
    pid = next((int(x.split('=')[1]) for x in lines
                if x.startswith('process pid=')), None)
    try:
        return differs(ev.get(pid, []), dd.get(pid, []), '\n'.join(lines))
    except graph_model.TraceError:
        return None


def smaller_lines(line):
    """Each version of `line` with one list element or one stack= less."""
    words = line.split(' ')
    for k, w in enumerate(words):
        if w.startswith('stack=') and k > 0:
            yield ' '.join(words[:k] + words[k + 1:])
        for key in ('read=', 'write='):
            if w.startswith(key):
                els = w[len(key):].split(',')
                for j in range(len(els)):
                    rest = ','.join(els[:j] + els[j + 1:])
                    new = words[:k] + ([key + rest] if rest else []) \
                        + words[k + 1:]
                    yield ' '.join(new)


def shrink(ctl, lines, tmp):
    """Drops lines, then list elements and stack= fields, while the
    mismatch stays, until nothing more can go."""
    keep = 2    # header and process line
    changed = True
    while changed:
        changed = False
        i = len(lines) - 1
        while i >= keep:
            cand = lines[:i] + lines[i + 1:]
            if check_one(ctl, cand, tmp):
                lines = cand
                changed = True
            else:
                for small in smaller_lines(lines[i]):
                    cand = lines[:i] + [small] + lines[i + 1:]
                    if check_one(ctl, cand, tmp):
                        lines = cand
                        changed = True
                        break
            i -= 1
    return lines


def report(ctl, lines, tmp, keep):
    small = shrink(ctl, lines, tmp)
    msg = check_one(ctl, small, tmp)
    print('MISMATCH; minimal trace:')
    print('\n'.join('    ' + x for x in small))
    print(msg)
    text = '\n'.join(small) + '\n'
    for every in (True,):
        print('model (--every):')
        for fd in model_findings(text, every):
            print('    ' + json.dumps(fd))
    path = os.path.join(tmp, 'shrink.trace')
    ev, err = run_engine(ctl, [path], True)
    print('engine (--every):')
    for fds in (ev or {}).values():
        for fd in fds:
            print('    ' + json.dumps(fd))
    if keep:
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, 'full.trace'), 'w') as fh:
            fh.write('\n'.join(lines) + '\n')
        with open(os.path.join(keep, 'minimal.trace'), 'w') as fh:
            fh.write(text)


def supports_v2(ctl, tmp):
    path = os.path.join(tmp, 'probe.trace')
    with open(path, 'w') as fh:
        fh.write('npusan-trace 2\nlaunch stream=0 op=probe\n')
    p = subprocess.run([ctl, 'analyze', '--json', path],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return p.returncode != 2


def run_batch(ctl, traces, tmp, stats):
    """traces: [(pid, lines)]; returns the lines of the first that differs."""
    paths = []
    for pid, lines in traces:
        path = os.path.join(tmp, 't%d.trace' % pid)
        with open(path, 'w') as fh:
            fh.write('\n'.join(lines) + '\n')
        paths.append(path)
    ev, err = run_engine(ctl, paths, True)
    dd, err2 = run_engine(ctl, paths, False)
    if ev is None or dd is None:
        raise RuntimeError('npusanctl refused a generated trace:\n'
                           + (err or err2))
    for pid, lines in traces:
        stats['traces'] += 1
        stats['findings'] += len(ev.get(pid, []))
        stats['rows'] += len(dd.get(pid, []))
        if differs(ev.get(pid, []), dd.get(pid, []), '\n'.join(lines)):
            return lines
    return None


def check_files(ctl, files, tmp):
    bad = 0
    for f in files:
        with open(f, encoding='utf-8') as fh:
            text = fh.read()
        ev, err = run_engine(ctl, [f], True)
        dd, _ = run_engine(ctl, [f], False)
        if ev is None:
            print('%s: npusanctl refused it: %s' % (f, err.strip()))
            bad += 1
            continue
        _, proc, _ = graph_model.parse_trace(text)
        pid = graph_model.parse_number(proc['pid']) if proc and \
            'pid' in proc else None
        msg = differs(ev.get(pid, []), dd.get(pid, []), text)
        n = len(ev.get(pid, []))
        print('%s: %s (%d findings)' % (f, 'DIFFERS\n' + msg if msg
                                        else 'equal', n))
        bad += bool(msg)
    return 1 if bad else 0


def check_expected(ctl, folder, engine_too, tmp):
    """Each FOLDER/NAME.trace against NAME.expected.json: the model's
    deduplicated findings must be the ones checked in (written by this
    model and checked by hand), and with engine_too npusanctl's as well."""
    bad = 0
    names = sorted(f for f in os.listdir(folder) if f.endswith('.trace'))
    for name in names:
        path = os.path.join(folder, name)
        with open(path, encoding='utf-8') as fh:
            text = fh.read()
        with open(path[:-len('.trace')] + '.expected.json',
                  encoding='utf-8') as fh:
            want = [json.loads(x) for x in fh.read().splitlines()]
        got = model_findings(text, False)
        if got != want:
            print('%s: the model no longer gives %s.expected.json:\n%s'
                  % (path, name[:-6], '\n'.join(map(json.dumps, got))))
            bad += 1
    if engine_too:
        bad += check_files(ctl, [os.path.join(folder, n) for n in names],
                           tmp)
    print('graph_diff: %d traces of %s checked' % (len(names), folder))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--npusanctl', required=True)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--count', type=int, default=300)
    ap.add_argument('--v1-only', action='store_true')
    ap.add_argument('--keep', help='copy a failing trace here')
    ap.add_argument('--check', nargs='+', metavar='FILE')
    ap.add_argument('--expected', metavar='DIR',
                    help='also check DIR/*.trace against *.expected.json')
    try:
        o = ap.parse_args()
    except SystemExit as e:
        return 2 if e.code else 0
    if not os.access(o.npusanctl, os.X_OK) or o.count < 0:
        sys.stderr.write('graph_diff: bad --npusanctl or --count\n')
        return 2
    with tempfile.TemporaryDirectory(prefix='graph_diff.') as tmp:
        if o.check:
            return check_files(o.npusanctl, o.check, tmp)
        if not o.v1_only and not supports_v2(o.npusanctl, tmp):
            print('graph_diff: %s refuses trace version 2: skipped'
                  % o.npusanctl)
            return 77
        if o.expected and check_expected(o.npusanctl, o.expected,
                                         not o.v1_only, tmp):
            return 1
        stats = collections.Counter()
        todo = [(i + 1, make_trace(o.seed, i, not o.v1_only and i % 4 != 0,
                                   i + 1)) for i in range(o.count)]
        for k in range(0, len(todo), BATCH):
            bad = run_batch(o.npusanctl, todo[k:k + BATCH], tmp, stats)
            if bad:
                report(o.npusanctl, bad, tmp, o.keep)
                return 1
        print('graph_diff: %d traces (%s), %d findings and %d deduplicated '
              'rows equal' % (stats['traces'], 'v1' if o.v1_only else
                              'v1 and v2', stats['findings'], stats['rows']))
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except RuntimeError as e:
        sys.stderr.write('graph_diff: %s\n' % e)
        sys.exit(2)
