#!/usr/bin/env python3
"""graph_model.py - an independent reference model of npusan's analysis.

Written from shared/spec/trace-format.md (v1), graphs.md (v2) and
findings.md only, never from engine/: it is what graph_diff.py compares
`npusanctl analyze` with. It is deliberately simple and slow: access history
is a dict per byte, vector clocks are dicts, nothing is clever.

    python3 graph_model.py [--every] TRACE   prints the findings as JSON Lines

It reads valid traces; it checks little of the lexical rules (the engine's
parser has its own tests) and stops with an error on what it cannot read.

Where the specs are silent, it assumes (npusanctl agrees on all the version
1 points):
- order of findings within one operation: a launch checks its read elements,
  then its write elements, each in listing order, and meets the previous
  accesses scanning bytes upwards; a free reports usage streams in the order
  of their first use; a flush goes through allocations by address; a replay
  reports a launch's stale allocations before running it; capture_end
  reports members in the order they joined;
- a deduplicated row shows its first occurrence; detected_at is not part of
  the key; missing_record_stream's key holds the allocation's stream and
  stack; `alloc.size` is printed as written (size=0 too);
- the wait by which a stream joins a capture is captured: it changes no
  version 1 state of that stream;
- a stale_graph_address carries the sequence number its launch then takes;
- replaying into a capture needs a captured graph, as an eager replay does.
"""
import json
import sys

MAX64 = (1 << 64) - 1


class TraceError(Exception):
    pass


# ---------------------------------------------------------------- parsing

def _strip_comment_and_split(line, lineno):
    """Splits a line into tokens, a token being a bare word or key=value
    where the value may be a quoted string; `#` outside quotes ends it."""
    toks, cur, i, n = [], '', 0, len(line)
    while i < n:
        c = line[i]
        if c == '#':
            break
        if c in ' \t':
            if cur:
                toks.append(cur)
                cur = ''
            i += 1
            continue
        if c == '"':
            i += 1
            s = ''
            while True:
                if i >= n:
                    raise TraceError('%d: unterminated string' % lineno)
                c = line[i]
                if c == '"':
                    i += 1
                    break
                if c == '\\':
                    e = line[i + 1] if i + 1 < n else ''
                    s += {'"': '"', '\\': '\\', 'n': '\n', 't': '\t'}[e]
                    i += 2
                    continue
                s += c
                i += 1
            cur += '\0' + s     # marks a quoted value: kept as written
            continue
        cur += c
        i += 1
    if cur:
        toks.append(cur)
    return toks


def parse_number(s):
    s = s.replace('\0', '')
    v = int(s[2:], 16) if s.startswith('0x') else int(s, 10)
    if v < 0 or v > MAX64:
        raise TraceError('number out of range: %s' % s)
    return v


def parse_list(s):
    """A pointer list: [(start, length)], duplicates dropped, order kept.
    An element's argument name (``@NAME``) changes nothing here."""
    out = []
    for el in s.split(',') if s else []:
        el = el.split('@', 1)[0]
        if '+' in el:
            p, ln = el.split('+', 1)
            item = (parse_number(p), parse_number(ln))
        else:
            item = (parse_number(el), 1)
        if item not in out:
            out.append(item)
    return out


def parse_trace(text):
    """Returns (version, process, [(lineno, directive, fields)]), where
    fields maps key -> raw string, 'frame' -> list of strings."""
    version, process, ops = None, None, []
    for lineno, line in enumerate(text.split('\n'), 1):
        line = line.rstrip('\r')
        toks = _strip_comment_and_split(line, lineno)
        if not toks:
            continue
        if version is None:
            if len(toks) != 2 or toks[0] != 'npusan-trace' \
                    or toks[1] not in ('1', '2'):
                raise TraceError('%d: bad header' % lineno)
            version = int(toks[1])
            continue
        fields = {'frame': []}
        for t in toks[1:]:
            if '=' not in t:
                raise TraceError('%d: not key=value: %r' % (lineno, t))
            k, v = t.split('=', 1)
            if k == 'frame':
                fields['frame'].append(v.replace('\0', ''))
            else:
                fields[k] = v
        if toks[0] == 'process':
            process = fields
        else:
            ops.append((lineno, toks[0], fields))
    if version is None:
        raise TraceError('no header')
    return version, process, ops


# ----------------------------------------------------------------- model

class Alloc:
    """One allocation; identity is the object (a new alloc at the same
    address is a new allocation)."""

    def __init__(self, ptr, size, stream, stack, pool):
        self.ptr, self.size, self.stream = ptr, size, stream
        self.stack, self.pool = stack, pool
        self.end = ptr + max(size, 1)
        self.usages = {}        # stream -> Access (latest use, wrote any)
        self.recorded = set()   # streams named by record_stream
        self.reported = set()   # usage streams already reported
        self.exempt = False     # live at a gap

    def json(self):
        return {'ptr': hex(self.ptr), 'size': self.size,
                'stream': self.stream, 'stack': list(self.stack)}


class Access:
    """One element of one launch (or the launch itself, for usages)."""
    __slots__ = ('stream', 'seq', 'type', 'op', 'stack', 'graph', 'ptr')

    def __init__(self, stream, seq, type_, op, stack, graph, ptr):
        self.stream, self.seq, self.type = stream, seq, type_
        self.op, self.stack, self.graph, self.ptr = op, stack, graph, ptr

    def json(self):
        return {'stream': self.stream, 'seq': self.seq, 'type': self.type,
                'op': self.op, 'stack': list(self.stack),
                'graph': self.graph}


class History:
    """Per-byte access history: byte -> [last write or None, [reads]]."""

    def __init__(self):
        self.b = {}

    def drop_range(self, lo, hi):
        for x in range(lo, hi):
            self.b.pop(x, None)

    def drop_starting_at(self, p):
        for x in list(self.b):
            w, reads = self.b[x]
            if w is not None and w.ptr == p:
                w = None
            reads = [r for r in reads if r.ptr != p]
            if w is None and not reads:
                del self.b[x]
            else:
                self.b[x] = [w, reads]

    def conflicts(self, acc, nbytes, clock):
        """Previous accesses that `acc` (on bytes `nbytes`) conflicts with,
        in first-met order, each once."""
        out = []
        for x in sorted(nbytes):
            w, reads = self.b.get(x, (None, []))
            cands = [w] if acc.type == 'read' or not reads else reads
            if acc.type == 'read' and w is None:
                cands = []
            for prev in cands:
                if prev is None:
                    continue
                if not prev.seq <= clock.get(prev.stream, -1) \
                        and prev not in out:
                    out.append(prev)
        return out

    def update(self, acc, nbytes):
        for x in nbytes:
            if acc.type == 'write':
                self.b[x] = [acc, []]
            else:
                w, reads = self.b.get(x, (None, []))
                self.b[x] = [w, reads + [acc]]


def merge(into, src):
    for k, v in src.items():
        if v > into.get(k, -1):
            into[k] = v


def trim(reads, writes):
    """Version 1's element rule: [(type, start, len, bytes)] in check order,
    writes in listing order (the later the last), reads minus written
    bytes, a read that keeps no byte dropped."""
    written = set()
    for p, ln in writes:
        written.update(range(p, p + ln))
    out = []
    for p, ln in reads:
        keep = set(range(p, p + ln)) - written
        if keep:
            out.append(('read', p, ln, keep))
    for p, ln in writes:
        out.append(('write', p, ln, set(range(p, p + ln))))
    return out


class Capture:
    def __init__(self, graph, origin):
        self.graph, self.origin = graph, origin
        self.members = [origin]
        self.cstate = {origin: {origin: 0}}
        self.n = 0
        self.history = History()
        self.last = {}          # member -> (n, op, stack, type, ptr)
        self.footprint = []     # (stream, op, stack, elements, allocs)
        self.active = True


class Graph:
    def __init__(self):
        self.capture = None     # the active Capture while capturing
        self.footprint = None   # set once captured
        self.done = None
        self.stale = set()      # ids of allocations reported stale


class Model:
    def __init__(self, process=None, dedup=True):
        self.findings = []      # [finding dict], in detection order
        self.dedup = dedup
        self.process = process
        self.seq = 0
        self.host = {0: 0}
        self.state = {0: {0: 0}}
        self.recorded = {}          # event -> clock
        self.maker = {}             # event -> Capture of its latest record
        self.crec = {}              # event -> capture-local clock
        self.allocs = []            # live Alloc objects
        self.history = History()
        self.graphs = {}            # graph id -> Graph
        self.in_capture = {}        # stream -> active Capture
        self.stacks = {}

    # -- findings
    def report(self, kind, ptr, alloc, access, previous, at):
        self.findings.append({
            'kind': kind, 'ptr': hex(ptr),
            'alloc': alloc.json() if alloc else None,
            'access': access.json(),
            'previous': previous.json() if previous else None,
            'detected_at': at, 'count': 1})

    # -- streams and events
    def stream(self, s):
        if s not in self.state:
            self.host[s] = 0
            self.state[s] = dict(self.host)
        return self.state[s]

    def event(self, e):
        if e not in self.recorded:
            self.recorded[e] = {}

    def reset_event(self, e):
        self.recorded[e] = {}
        self.maker.pop(e, None)
        self.crec.pop(e, None)

    def active_maker(self, e):
        c = self.maker.get(e)
        return c if c is not None and c.active else None

    def any_capture(self):
        return bool(self.in_capture)

    def sync_all(self, clock):
        for s in self.state:
            merge(self.state[s], clock)
        merge(self.host, clock)

    # -- allocations
    def alloc_at(self, p):
        for a in self.allocs:
            if a.ptr <= p < a.end:
                return a
        return None

    def release(self, a):
        self.history.drop_range(a.ptr, a.end)
        self.allocs.remove(a)

    def check_usages(self, a, at):
        if a.exempt or a.stream is None:
            return
        for u, use in a.usages.items():
            if u in a.recorded or u in a.reported:
                continue
            if use.seq <= self.state[a.stream].get(u, -1):
                continue
            a.reported.add(u)
            self.report('missing_record_stream', a.ptr, a, use, None, at)

    # -- launches
    def eager_launch(self, s, op, stack, elements, graph, at):
        """A version 1 launch (also one launch of a replay) on stream s."""
        clock = self.stream(s)
        self.seq += 1
        n = self.seq
        clock[s] = n
        accs = []
        for type_, p, ln, nbytes in elements:
            acc = Access(s, n, type_, op, stack, graph, p)
            owner = self.alloc_at(p)
            for prev in self.history.conflicts(acc, nbytes, clock):
                self.report('data_race', p, owner, acc, prev, at)
            accs.append((acc, nbytes, owner))
        for acc, nbytes, owner in accs:
            self.history.update(acc, nbytes)
        self.record_usages(s, n, op, stack, graph, accs, elements)
        return n

    def record_usages(self, s, n, op, stack, graph, accs, elements):
        owners = []
        for acc, nbytes, owner in accs:
            if owner is not None and owner not in owners:
                owners.append(owner)
        for a in owners:
            if a.stream is None or a.stream == s or a.exempt:
                continue
            wrote = any(t == 'write' and p < a.end and a.ptr < p + ln
                        for t, p, ln, _ in elements)
            a.usages[s] = Access(s, n, 'write' if wrote else 'read', op,
                                 stack, graph, a.ptr)

    def captured_launch(self, c, t, op, stack, elements):
        c.n += 1
        n = c.n
        clock = c.cstate[t]
        clock[t] = n
        accs = []
        for type_, p, ln, nbytes in elements:
            acc = Access(t, n, type_, op, stack, c.graph, p)
            owner = self.alloc_at(p)
            for prev in c.history.conflicts(acc, nbytes, clock):
                self.report('data_race', p, owner, acc, prev, 'capture')
            accs.append((acc, nbytes, owner))
        for acc, nbytes, owner in accs:
            c.history.update(acc, nbytes)
        writes = [p for ty, p, _, _ in elements if ty == 'write']
        reads = [p for ty, p, _, _ in elements if ty == 'read']
        first = writes[0] if writes else (reads[0] if reads else 0)
        c.last[t] = (n, op, stack, 'write' if writes else 'read', first)
        c.footprint.append((t, op, stack, elements,
                            [o for _, _, o in accs]))

    # -- captures and graphs
    def join(self, c, t, clock):
        c.members.append(t)
        c.cstate[t] = dict(clock)
        merge(c.cstate[t], {t: 0})
        self.in_capture[t] = c

    def leave(self, c):
        c.active = False
        for t in c.members:
            self.in_capture.pop(t, None)

    def capture_begin(self, s, g):
        self.stream(s)
        if s in self.in_capture:
            return
        old = self.graphs.get(g)
        if old is not None and old.capture is not None:
            return
        gr = Graph()
        self.graphs[g] = gr
        c = Capture(g, s)
        gr.capture = c
        self.in_capture[s] = c

    def capture_end(self, s, g):
        self.stream(s)
        gr = self.graphs.get(g)
        if gr is None or gr.capture is None or gr.capture.origin != s:
            return
        c = gr.capture
        for t in c.members:
            if t == s or t not in c.last:
                continue
            n, op, stack, type_, ptr = c.last[t]
            if not n <= c.cstate[s].get(t, -1):
                acc = Access(t, n, type_, op, stack, g, ptr)
                self.report('unjoined_capture', ptr, None, acc, None,
                            'capture_end')
        self.leave(c)
        gr.capture = None
        gr.footprint = c.footprint

    def graph_destroy(self, g):
        gr = self.graphs.pop(g, None)
        if gr is not None and gr.capture is not None:
            self.leave(gr.capture)

    def graph_replay(self, g, r):
        self.stream(r)
        gr = self.graphs.get(g)
        if gr is None or gr.footprint is None:
            return
        c = self.in_capture.get(r)
        if c is not None:
            for _, op, stack, elements, _ in gr.footprint:
                self.captured_launch(c, r, op, stack, elements)
            return
        if gr.done is not None:
            merge(self.state[r], gr.done)
        for _, op, stack, elements, owners in gr.footprint:
            for a in owners:
                if a is None or a.pool or a in self.allocs \
                        or id(a) in gr.stale:
                    continue
                gr.stale.add(id(a))
                wrote = any(t == 'write' and p < a.end and a.ptr < p + ln
                            for t, p, ln, _ in elements)
                acc = Access(r, self.seq + 1, 'write' if wrote else 'read',
                             op, stack, g, a.ptr)
                self.report('stale_graph_address', a.ptr, a, acc, None,
                            'replay')
            self.eager_launch(r, op, stack, elements, g, 'replay')
        gr.done = dict(self.state[r])

    # -- one operation
    def op(self, d, f):
        num = lambda k: parse_number(f[k])
        stack = self.stacks.get(num('stack'), []) if 'stack' in f else []
        handler = getattr(self, 'op_' + d, None)
        if handler is None:
            raise TraceError('unknown directive %s' % d)
        handler(f, num, stack)

    def op_stack(self, f, num, stack):
        self.stacks[num('id')] = list(f['frame'])

    def op_stream_create(self, f, num, stack):
        self.stream(num('stream'))

    def op_event_create(self, f, num, stack):
        self.reset_event(num('event'))

    op_event_destroy = op_event_create

    def op_event_record(self, f, num, stack):
        e, s = num('event'), num('stream')
        self.event(e)
        self.stream(s)
        c = self.in_capture.get(s)
        if c is not None:
            self.crec[e] = dict(c.cstate[s])
            self.maker[e] = c
        else:
            self.recorded[e] = dict(self.state[s])
            self.maker.pop(e, None)
            self.crec.pop(e, None)

    def op_event_wait(self, f, num, stack):
        e, t = num('event'), num('stream')
        self.event(e)
        self.stream(t)
        c = self.in_capture.get(t)
        mk = self.active_maker(e)
        if c is not None:
            if mk is c:
                merge(c.cstate[t], self.crec[e])
        elif mk is not None:
            self.join(mk, t, self.crec[e])
        else:
            merge(self.state[t], self.recorded[e])

    def op_stream_wait(self, f, num, stack):
        a, b = num('stream'), num('on')
        self.stream(a)
        self.stream(b)
        c = self.in_capture.get(a)
        cb = self.in_capture.get(b)
        if c is not None:
            if cb is c:
                merge(c.cstate[a], c.cstate[b])
        elif cb is not None:
            self.join(cb, a, cb.cstate[b])
        else:
            merge(self.state[a], self.state[b])

    def op_event_sync(self, f, num, stack):
        e = num('event')
        self.event(e)
        if self.active_maker(e) is None:
            self.sync_all(self.recorded[e])

    def op_stream_sync(self, f, num, stack):
        s = num('stream')
        self.stream(s)
        if s not in self.in_capture:
            self.sync_all(dict(self.state[s]))

    def op_device_sync(self, f, num, stack):
        if self.any_capture():
            return
        for t in self.state:
            self.host[t] = self.state[t].get(t, -1)
        self.sync_all(dict(self.host))

    def op_alloc(self, f, num, stack):
        p, size = num('ptr'), num('size')
        s = num('stream') if 'stream' in f else None
        if s is not None:
            self.stream(s)
        a = Alloc(p, size, s, stack, 'graph' in f)
        for old in [o for o in self.allocs if o.ptr < a.end and a.ptr < o.end]:
            self.release(old)
        self.history.drop_range(a.ptr, a.end)
        self.allocs.append(a)

    def op_free(self, f, num, stack):
        p = num('ptr')
        a = next((o for o in self.allocs if o.ptr == p), None)
        if a is None:
            self.history.drop_starting_at(p)
            return
        self.check_usages(a, 'free')
        self.release(a)

    def op_record_stream(self, f, num, stack):
        p, s = num('ptr'), num('stream')
        self.stream(s)
        a = self.alloc_at(p)
        if a is not None:
            a.recorded.add(s)

    def op_flush(self, f, num, stack):
        for a in sorted(self.allocs, key=lambda o: o.ptr):
            self.check_usages(a, 'flush')

    def op_gap(self, f, num, stack):
        self.history = History()
        for a in self.allocs:
            a.usages = {}
            a.exempt = True
        for gr in self.graphs.values():
            if gr.capture is not None:
                self.leave(gr.capture)
        self.graphs = {}
        self.in_capture = {}
        self.maker = {}
        self.crec = {}

    def op_launch(self, f, num, stack):
        s, op = num('stream'), f['op'].replace('\0', '')
        elements = trim(parse_list(f.get('read', '')),
                        parse_list(f.get('write', '')))
        self.stream(s)
        c = self.in_capture.get(s)
        if c is not None:
            self.captured_launch(c, s, op, stack, elements)
        else:
            self.eager_launch(s, op, stack, elements, None, 'launch')

    def op_capture_begin(self, f, num, stack):
        self.capture_begin(num('stream'), num('graph'))

    def op_capture_end(self, f, num, stack):
        self.capture_end(num('stream'), num('graph'))

    def op_graph_replay(self, f, num, stack):
        self.graph_replay(num('graph'), num('stream'))

    def op_graph_destroy(self, f, num, stack):
        self.graph_destroy(num('graph'))

    # -- output
    def process_json(self):
        p = self.process or {}
        return {'pid': parse_number(p['pid']) if 'pid' in p else None,
                'job': p.get('job', '\0').replace('\0', '') if 'job' in p
                else None,
                'rank': parse_number(p['rank']) if 'rank' in p else None}

    def result(self):
        rows = self.findings if not self.dedup else dedup(self.findings)
        order = ('kind', 'ptr', 'alloc', 'access', 'previous', 'detected_at',
                 'count')
        out = []
        for i, fd in enumerate(rows, 1):
            row = {'id': i, 'kind': fd['kind'],
                   'process': self.process_json()}
            row.update((k, fd[k]) for k in order)
            out.append(row)
        return out


def _acc_key(a):
    if a is None:
        return None
    return (a['stream'], a['op'], a['type'], tuple(a['stack']), a['graph'])


def dedup_key(fd):
    """findings.md's key: kind, both accesses (stream, op, type, stack,
    graph) without pointer or seq; for missing_record_stream also the
    allocation's stream and stack (the allocation stream is its second
    stream, its stack its second stack: npusanctl does so), for
    stale_graph_address the captured allocation's stack (graphs.md)."""
    al = fd['alloc']
    alk = None
    if fd['kind'] == 'missing_record_stream':
        alk = (al['stream'], tuple(al['stack']))
    elif fd['kind'] == 'stale_graph_address':
        alk = tuple(al['stack'])
    return (fd['kind'], _acc_key(fd['access']), _acc_key(fd['previous']),
            alk)


def dedup(findings):
    rows, index = [], {}
    for fd in findings:
        k = dedup_key(fd)
        if k in index:
            index[k]['count'] += 1
        else:
            index[k] = dict(fd)
            rows.append(index[k])
    return rows


def analyze_text(text, dedup=True):
    version, process, ops = parse_trace(text)
    m = Model(process, dedup)
    for lineno, d, f in ops:
        try:
            m.op(d, f)
        except (KeyError, ValueError) as e:
            raise TraceError('%d: %s: %r' % (lineno, d, e))
    return m.result()


def main(argv):
    every = '--every' in argv
    paths = [a for a in argv[1:] if a != '--every']
    if len(paths) != 1:
        sys.stderr.write('usage: graph_model.py [--every] TRACE\n')
        return 2
    with open(paths[0], encoding='utf-8') as fh:
        text = fh.read()
    try:
        findings = analyze_text(text, dedup=not every)
    except TraceError as e:
        sys.stderr.write('%s:%s\n' % (paths[0], e))
        return 2
    for fd in findings:
        sys.stdout.write(json.dumps(fd, ensure_ascii=False,
                                    separators=(',', ':')) + '\n')
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
