#!/usr/bin/env python3
"""
The emulator's stand-in headers against the real CUDA, cuBLAS, cuBLASLt, NCCL, cuda_bf16,
cub and NVTX headers (test/emu/test_headers.sh runs it; `make check-headers`).

The project's CUDA code compiles against the real headers with nvcc and against the
stand-ins (test/emu) with g++: a constant or a signature that differs means the emulated
tests test something other than what runs on a GPU. This reads every declaration of every
stand-in and checks it against the real headers:

  enumerators       the value, and that it is an enumerator of the enum type it belongs to
  #define'd names   the value when the stand-in's is an integer, else that the real defines it
  type names        that the type exists and is of the same kind (enum, class, pointer)
  struct members    each field's type; size, alignment and the fields' offsets; constructors
                    and conversion operators (constructible / convertible the same way)
  functions         the exact signature: static_cast<R (*)(Args...)>(&name) must pick a real
                    overload (or deduce a real template), R and Args the stand-in's
  variables         the type (built-ins such as threadIdx: const on a GPU, written here by
                    the emulator's scheduler, so compared without const)

What a stand-in is (no list): a header under test/emu that an angle-bracket #include of the
project's CUDA code (llmc, zero3, the .cu files, test/gpu, test/emu's tests) or of another
stand-in resolves to through -Itest/emu. What is excluded, by rule: names starting with emu
(any case: emu_*, Emu*, EMU_*), the include guard, and code under a conditional on an EMU_
macro (the emulator's own definitions: its globals, MPI interposers, the fiber switch). The
emulator-only trailing parameters `const char* file = __builtin_FILE(), int line =
__builtin_LINE()` (where a call was issued, for the emulator's messages) are not part of the
compared signature: any trailing parameters whose default is a __builtin_ source location.

The parse is itself checked: every check is first compiled against the stand-ins with g++
(each must hold there: the value read, the signature read, with the emulator-only
parameters), then against the real headers with nvcc. One check per line of the generated
translation units; a check that does not compile is a FAIL with the compiler's message (the
unit is compiled again without the failing lines until it compiles). A declaration the parser
cannot classify is a FAIL too, so nothing is skipped silently.

Prints "PASS ..." / "FAIL ..." lines and "N passed, N failed"; "SKIP <what>: <reason>" and
"0 passed, 0 failed" where nvcc or the real headers are missing.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
EMU = os.path.join(ROOT, 'test', 'emu')
OUT = os.path.join(ROOT, os.environ.get('HDR_BUILD', 'build/headers'))

# ---------------------------------------------------------------------------------------
# The allowlist: stand-in types that deliberately differ from the real ones. Each is still
# checked to exist and to be of the same kind (class, enum, pointer); what is not compared:
#   'fields'  the members (names and types): the stand-in's are the emulator's own; checked
#             instead that the real type has none of them, so project code that used one
#             would not compile with nvcc (test/gpu/test_cuda_build.sh)
#   'size'    size, alignment and offsets: the stand-in declares only some of the members
DIFFERENT = {
    # cuBLASLt's algorithm is 64 opaque bytes (uint64_t data[8]); the stand-in's carries the
    # alignments its heuristic assumed, so that cublasLtMatmul can refuse a less aligned
    # pointer as the documentation says the library may fail. llmc/matmul.cuh only copies
    # one whole (heur.algo into its cache) and passes its address.
    'cublasLtMatmulAlgo_t': {'fields', 'size'},
    # the real __nv_bfloat16 keeps its 16 bits in a protected member (__x); the stand-in's
    # is a public x for the emulator's conversions. Size and alignment are compared (2, 2):
    # the project stores bf16 arrays and sends them as 16-bit words.
    '__nv_bfloat16': {'fields'},
    # the properties the project reads (name, uuid, major, minor, multiProcessorCount, the
    # shared memory limits, totalGlobalMem: each field compared); the real struct has ~90
    'cudaDeviceProp': {'size'},
    # NCCL's config has its size, magic, version and a dozen more ahead of `blocking`, the
    # one field the stand-in keeps (compared); NCCL_CONFIG_INITIALIZER is the real's
    'ncclConfig_t': {'size'},
    # the real result ends with int reserved[4]; the four fields before it are compared
    'cublasLtMatmulHeuristicResult_t': {'size'},
}

# The types a function template of the stand-ins is checked at (the real one must deduce
# the same signature): the types the project instantiates it with. Unlisted templates are
# checked with every type parameter float.
TEMPLATE_ARGS = {
    'cudaFuncSetAttribute': [{'K': 'void (*)(float*)'}],       # a kernel (llmc/attention_flash.cuh)
    '__shfl_xor_sync': [{'T': 'float'}, {'T': 'unsigned long long'}],  # llmc's sums, zero3/quant.cuh's keys
    'cub::DeviceRadixSort::SortPairs': [{'K': 'int', 'V': 'int'}],     # llmc/encoder.cuh
}

# where the project's angle-bracket includes are (the stand-ins are what they resolve to)
INCLUDERS = ['llmc/*.cuh', 'llmc/*.h', 'zero3/*.cuh', 'zero3/*.h', '*.cu', 'test/gpu/*.cu', 'test/emu/*.cc']

TYPE_KEYWORDS = {'void', 'bool', 'char', 'short', 'int', 'long', 'float', 'double', 'signed', 'unsigned',
                 'const', 'volatile', 'struct', 'enum', 'class', 'union', 'typename', 'auto'}
SPECIFIERS = {'static', 'inline', 'extern', 'constexpr', 'virtual', 'explicit', 'friend', 'mutable'}
NOT_FUNCTION_NAMES = {'alignas', '__attribute__', 'decltype', 'sizeof', 'noexcept', 'throw', 'alignof',
                      '__declspec', '__align__'}


def is_emu(name):
    last = name.split('::')[-1]
    return name.lower().startswith('emu') or last.lower().startswith('emu')


# ---------------------------------------------------------------------------------------
# reading a header: comments, the preprocessor, tokens

def strip_comments(text):
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '/' and text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif c == '/' and text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def preprocess(text):
    """the text with every directive blanked and EMU_-conditional code removed; the #defines"""
    logical = re.sub(r'\\\n', ' ', strip_comments(text)).split('\n')  # continued lines joined
    out, macros, stack = [], [], []
    directives = [(i, l.strip()) for i, l in enumerate(logical) if l.strip().startswith('#')]
    guard = None
    if directives:
        m0 = re.match(r'#\s*ifndef\s+(\w+)', directives[0][1])
        if m0 and len(directives) > 1 and re.match(r'#\s*define\s+' + m0.group(1) + r'\b', directives[1][1]):
            guard = m0.group(1)
    for line in logical:
        s = line.strip()
        skipping = any(stack)
        if s.startswith('#'):
            m = re.match(r'#\s*(\w+)\s*(.*)', s)
            d, rest = (m.group(1), m.group(2)) if m else ('', '')
            if d in ('if', 'ifdef', 'ifndef'):
                is_guard = d == 'ifndef' and rest.strip() == guard and not stack
                stack.append((not is_guard) and bool(re.search(r'\bEMU_', rest)))
            elif d == 'endif':
                if stack:
                    stack.pop()
            elif d == 'define' and not skipping:
                md = re.match(r'(\w+)(\([^)]*\))?\s*(.*)', rest)
                if md and md.group(1) != guard:
                    macros.append((md.group(1), md.group(2), md.group(3).strip()))
            out.append('')
        else:
            out.append('' if skipping else line)
    return '\n'.join(out), macros


TOKEN_RE = re.compile(r'''
   (?P<ws>\s+)
  |(?P<id>[A-Za-z_][A-Za-z_0-9]*)
  |(?P<num>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.'])*)
  |(?P<str>"(?:\\.|[^"\\])*")
  |(?P<chr>'(?:\\.|[^'\\])*')
  |(?P<punct>::|->|\.\.\.|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%&|^!~=<>?:;,.(){}\[\]\#@$\\])
''', re.X)


def tokenize(text):
    toks, i = [], 0
    while i < len(text):
        m = TOKEN_RE.match(text, i)
        if not m:
            raise ValueError('cannot read %r' % text[i:i + 20])
        if m.lastgroup != 'ws':
            toks.append(m.group())
        i = m.end()
    return toks


def is_id(t):
    return re.match(r'^[A-Za-z_]\w*$', t) is not None


def match_close(toks, i):
    """the index of the bracket closing toks[i]"""
    pairs = {'(': ')', '[': ']', '{': '}'}
    want, depth = pairs[toks[i]], 0
    for j in range(i, len(toks)):
        if toks[j] in pairs:
            depth += 1
        elif toks[j] in (')', ']', '}'):
            depth -= 1
            if depth == 0:
                if toks[j] != want:
                    raise ValueError('unbalanced %s' % toks[i])
                return j
    raise ValueError('unclosed %s' % toks[i])


def match_angle(toks, i):
    """the index of the '>' closing the '<' at toks[i] (template parameter lists)"""
    depth = 0
    j = i
    while j < len(toks):
        t = toks[j]
        if t in ('(', '[', '{'):
            j = match_close(toks, j)
        elif t == '<':
            depth += 1
        elif t == '>':
            depth -= 1
        elif t == '>>':
            depth -= 2
        if depth <= 0 and t in ('>', '>>'):
            return j
        j += 1
    raise ValueError('unclosed <')


def split_top(toks, sep=',', angles=True):
    """toks split at sep outside brackets (and outside <...> before an '=')"""
    parts, cur, depth, angle, seen_eq = [], [], 0, 0, False
    for t in toks:
        if t in ('(', '[', '{'):
            depth += 1
        elif t in (')', ']', '}'):
            depth -= 1
        elif angles and not seen_eq and depth == 0 and t == '<':
            angle += 1
        elif angles and not seen_eq and depth == 0 and t in ('>', '>>') and angle > 0:
            angle -= 1 if t == '>' else 2
        elif t == '=' and depth == 0 and angle == 0:
            seen_eq = True
        if t == sep and depth == 0 and angle == 0:
            parts.append(cur)
            cur, seen_eq = [], False
        else:
            cur.append(t)
    if cur or parts:
        parts.append(cur)
    return parts


def text_of(toks):
    s = ' '.join(toks)
    s = re.sub(r' ?:: ?', '::', s)
    return s


# ---------------------------------------------------------------------------------------
# declarations

class Decl:
    """one declaration of a stand-in: kind, qualified name, and what the checks need"""
    def __init__(self, kind, name, header, **kw):
        self.kind, self.name, self.header = kind, name, header
        self.__dict__.update(kw)


def strip_specifiers(toks):
    """drops storage specifiers, attributes and the emulator's own macros (EMU_NO_TRACK)"""
    out, i = [], 0
    while i < len(toks):
        t = toks[i]
        if t in SPECIFIERS or (is_id(t) and is_emu(t) and t.isupper()):
            i += 1
        elif t == '__attribute__' and i + 1 < len(toks) and toks[i + 1] == '(':
            i = match_close(toks, i + 1) + 1
        else:
            out.append(t)
            i += 1
    return out


def template_header(toks):
    """(template parameters [(kind, name)], the tokens after the template header)"""
    if not toks or toks[0] != 'template':
        return None, toks
    j = match_angle(toks, 1)
    params = []
    for p in split_top(toks[2:j]):
        if p and p[0] in ('typename', 'class'):
            params.append(('type', p[-1] if len(p) > 1 and p[-1] != '...' else '?', '...' in p))
        else:
            params.append(('value', p[-1] if p else '?', False))
    return params, toks[j + 1:]


def parse_declarator_name(toks):
    """splits `T ... name` (a parameter or field) into (type tokens, name, array suffix)"""
    if toks and toks[-1] == ']':  # T name[N]
        k = len(toks) - 1
        while toks[k] != '[':
            k -= 1
        ty, name, inner = parse_declarator_name(toks[:k])
        return ty, name, inner + toks[k:]
    if len(toks) >= 2 and is_id(toks[-1]) and toks[-1] not in TYPE_KEYWORDS:
        rest = [t for t in toks[:-1] if t not in ('const', 'volatile')]
        if rest:
            return toks[:-1], toks[-1], []
    return toks, None, []


def parse_params(toks):
    """[(type text, name, default tokens)] of a parameter list"""
    if not toks or toks == ['void']:
        return []
    out = []
    for p in split_top(toks):
        default = None
        parts = split_top(p, sep='=', angles=True)
        if len(parts) > 1:
            p, default = parts[0], [t for part in parts[1:] for t in part]
        if p == ['...']:
            out.append(('...', None, default))
            continue
        if '(' in p:  # a function pointer: R (*name)(args)
            k = p.index('(')
            inner = p[k + 1:match_close(p, k)]
            name = inner[-1] if inner and is_id(inner[-1]) else None
            ty = p[:k] + ['(', '*', ')'] + p[match_close(p, k) + 1:]
            out.append((text_of(ty), name, default))
            continue
        ty, name, arr = parse_declarator_name(p)
        if arr:
            ty = ty + ['*']  # T x[] is T*
        out.append((text_of(ty), name, default))
    return out


def is_source_location(default):
    return default is not None and len(default) >= 1 and default[0] in ('__builtin_FILE', '__builtin_LINE',
                                                                        '__builtin_FUNCTION', '__builtin_COLUMN')


def function_head(toks):
    """(index of the '(' of the parameters, name tokens start) in a declaration's tokens, or None"""
    j = 0
    while j < len(toks):
        t = toks[j]
        if t == '(':
            prev = toks[j - 1] if j > 0 else ''
            if prev in NOT_FUNCTION_NAMES:
                j = match_close(toks, j) + 1
                continue
            if 'operator' in toks[:j] and prev != 'operator':  # operator T: a conversion, named `operator T`
                return j, toks.index('operator')
            if not is_id(prev) or prev in TYPE_KEYWORDS:  # foo<T>(...), R (*f)(...), operator(): not read
                return None
            start = j - 1
            while start >= 2 and toks[start - 1] == '::':
                start -= 2
            return j, start
        if t in ('[', '{'):
            j = match_close(toks, j) + 1
            continue
        if t == '=':
            return None
        j += 1
    return None


class Parser:
    def __init__(self, header):
        self.header = header
        self.decls = []
        self.unknown = []

    def add(self, d):
        if not is_emu(d.name):
            self.decls.append(d)

    def scope(self, toks, scope, cls=None):
        i = 0
        while i < len(toks):
            t = toks[i]
            if t == ';':
                i += 1
                continue
            if t == 'namespace' and i + 2 < len(toks) and toks[i + 2] == '{':
                k = match_close(toks, i + 2)
                self.scope(toks[i + 3:k], scope + [toks[i + 1]])
                i = k + 1
                continue
            if t == 'extern' and i + 2 < len(toks) and toks[i + 1].startswith('"') and toks[i + 2] == '{':
                k = match_close(toks, i + 2)
                self.scope(toks[i + 3:k], scope)
                i = k + 1
                continue
            if t in ('public', 'private', 'protected') and i + 1 < len(toks) and toks[i + 1] == ':':
                i += 2
                continue
            if t in ('__asm__', 'asm') or t == 'static_assert':
                while i < len(toks) and toks[i] != ';':
                    i = match_close(toks, i) if toks[i] in '([{' else i + 1
                i += 1
                continue
            # one declaration: up to its ';' or the end of its function body
            head, body, j, ended, top_eq = [], None, i, False, False
            while j < len(toks):
                tj = toks[j]
                if tj in ('(', '['):
                    k = match_close(toks, j)
                    head.extend(toks[j:k + 1])
                    j = k + 1
                    continue
                top_eq = top_eq or tj == '='
                if tj == ';':
                    break
                if tj == '{':
                    k = match_close(toks, j)
                    _, rest = template_header(head) if head and head[0] == 'template' else (None, head)
                    rest = strip_specifiers(rest)
                    if top_eq:  # an initializer
                        head.append('{...}')
                    elif body is None and (rest[:1] and rest[0] in ('struct', 'class', 'union', 'enum') or
                                           rest[:2] and rest[0] == 'typedef' and rest[1] in ('struct', 'class', 'union', 'enum')):
                        body = toks[j + 1:k]
                        head.append('{BODY}')
                    elif function_head(head) is not None:
                        body = toks[j + 1:k]
                        j = k + 1
                        ended = True
                        break
                    else:
                        head.append('{...}')
                    j = k + 1
                    continue
                head.append(tj)
                j += 1
            self.classify(head, body if body is not None else None, scope, cls, has_body=ended)
            i = j if ended else j + 1

    def classify(self, head, body, scope, cls, has_body):
        q = '::'.join(scope + ([cls] if cls else []))
        qual = (lambda n: q + '::' + n if q else n)
        tparams, rest = template_header(head)
        rest = list(rest)
        align = None
        # alignas(N) of a struct
        if 'alignas' in rest:
            a = rest.index('alignas')
            k = match_close(rest, a + 1)
            align = text_of(rest[a + 2:k])
            rest = rest[:a] + rest[k + 1:]
        is_static = 'static' in rest
        rest = strip_specifiers(rest)
        if not rest:
            return
        if rest[0] == 'typedef':
            r = rest[1:]
            if r and r[0] in ('enum', 'struct', 'class', 'union'):
                key = r[0]
                tag = r[1] if len(r) > 1 and is_id(r[1]) else None
                if '{BODY}' in r:
                    after = r[r.index('{BODY}') + 1:]
                    for dcl in split_top(after):
                        if not dcl:
                            continue
                        name = dcl[-1]
                        pointer = '*' in dcl
                        if key == 'enum':
                            self.enum(body, qual(name), tag)
                        elif pointer:
                            self.add(Decl('type', qual(name), self.header, what='pointer', text=text_of(r)))
                        else:
                            self.struct(body, qual(name), align)
                else:
                    name = r[-1]
                    self.add(Decl('type', qual(name), self.header, what='pointer' if '*' in r else
                                  ('enum' if key == 'enum' else 'class'), text=text_of(r)))
                return
            if not r or not is_id(r[-1]):  # typedef R (*F)(...): not read
                self.unknown.append((text_of(rest)[:60], 'a typedef'))
                return
            self.add(Decl('type', qual(r[-1]), self.header, what='pointer' if '*' in r else 'alias', text=text_of(r)))
            return
        if rest[0] == 'using':
            if len(rest) > 2 and is_id(rest[1]) and rest[2] == '=':  # using T = ...: a type name
                self.add(Decl('type', qual(rest[1]), self.header, what='alias', text=text_of(rest)))
            elif rest[1:2] != ['namespace']:
                self.unknown.append((text_of(rest)[:60], 'a using-declaration'))
            return
        if rest[0] == 'enum':
            tag = rest[1] if len(rest) > 1 and is_id(rest[1]) else None
            if body is not None:
                self.enum(body, None, qual(tag) if tag else None)
            return
        if rest[0] in ('struct', 'class', 'union'):
            name = rest[1] if len(rest) > 1 and is_id(rest[1]) else None
            if body is None or name is None:
                return  # a forward declaration
            if tparams is not None:
                if not is_emu(name):
                    self.unknown.append((qual(name), 'a class template'))
                return
            if '{BODY}' in rest and rest.index('{BODY}') + 1 < len(rest):
                # struct X {...} var; : declares variables too
                self.unknown.append((qual(name), 'a struct definition with declarators'))
            self.struct(body, qual(name), align)
            return
        fh = function_head(rest)
        if fh is not None:
            p, start = fh
            name_toks = rest[start:p]
            name = ''.join(name_toks) if 'operator' not in name_toks else ' '.join(name_toks)
            ret = rest[:start]
            pclose = match_close(rest, p)
            params = parse_params(rest[p + 1:pclose])
            tail = rest[pclose + 1:]
            if is_emu(name) or (cls is None and is_emu(qual(name))):
                return
            if cls is not None and name == cls:
                self.add(Decl('ctor', qual(name), self.header, cls=q, params=params,
                              explicit='explicit' in head))
            elif cls is not None and name.startswith('operator'):
                self.add(Decl('conversion', qual(name), self.header, cls=q, to=text_of(name_toks[1:]),
                              const='const' in tail, explicit='explicit' in head))
            else:  # (a member function: through a pointer to member, const as declared)
                member = cls is not None and not is_static
                self.add(Decl('function', qual(name), self.header, ret=text_of(ret), params=params,
                              tparams=tparams, member=q if member else None, const=member and 'const' in tail))
            return
        # variables: T a, b; / T a = ...;
        parts = split_top(rest)
        first = split_top(parts[0], sep='=')[0]
        ty, name, arr = parse_declarator_name(first)
        if name is None:
            self.unknown.append((text_of(rest)[:60], 'an unrecognised declaration'))
            return
        names = [(name, arr)]
        for extra in parts[1:]:
            e = split_top(extra, sep='=')[0]
            ptr = [t for t in e if t in ('*', '&')]
            if ptr:
                self.unknown.append((qual(e[-1]), 'declarators of different types'))
            names.append((e[-1], []))
        for n, a in names:
            if cls is not None:
                self.fields.append((n, text_of(ty) + (' ' + text_of(a) if a else ''), text_of(ty), text_of(a)))
            else:
                self.add(Decl('variable', qual(n), self.header, type=text_of(ty) + (text_of(a) if a else '')))

    def enum(self, body, typedef_name, tag):
        enum_type = typedef_name or tag
        if enum_type and not is_emu(enum_type):
            self.add(Decl('type', enum_type, self.header, what='enum', text='enum'))
        value = -1
        known = {}
        for e in split_top(body):
            if not e:
                continue
            name = e[0]
            if len(e) > 2 and e[1] == '=':
                value = eval_int(e[2:], known)
            else:
                value = None if value is None else value + 1
            known[name] = value
            if value is None:
                self.unknown.append((name, 'an enumerator whose value the check cannot read'))
            else:
                self.add(Decl('enumerator', name, self.header, value=value, enum=enum_type))

    def struct(self, body, name, align):
        if is_emu(name):
            return
        sub = Parser(self.header)
        sub.fields = []
        sub.scope(body, [], cls=name)
        self.add(Decl('type', name, self.header, what='class', text='struct'))
        self.add(Decl('struct', name, self.header, fields=sub.fields, align=align))
        for d in sub.decls:
            self.decls.append(d)
        self.unknown.extend(sub.unknown)


def eval_int(toks, known):
    expr = []
    for t in toks:
        if t in known:
            if known[t] is None:
                return None
            expr.append(str(known[t]))
        elif re.match(r'^(0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*$', t):
            expr.append(re.sub(r'[uUlL]+$', '', t))
        elif t in ('(', ')', '+', '-', '*', '|', '&', '^', '~', '<<', '>>'):
            expr.append(t)
        else:
            return None
    try:
        return int(eval(' '.join(expr), {'__builtins__': {}}, {}))
    except Exception:
        return None


# ---------------------------------------------------------------------------------------
# which headers are stand-ins

def stand_ins():
    """{relative path: file} of the headers under test/emu that angle-bracket includes reach"""
    found, queue = {}, []
    for pattern in INCLUDERS:
        queue.extend(sorted(glob.glob(os.path.join(ROOT, pattern))))
    seen = set()
    while queue:
        f = queue.pop(0)
        if f in seen:
            continue
        seen.add(f)
        try:
            text = open(f, encoding='utf-8', errors='replace').read()
        except OSError:
            continue
        for m in re.finditer(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', text, re.M):
            rel = m.group(2)
            cand = os.path.join(EMU, rel)
            quoted_here = m.group(1) == '"' and os.path.dirname(f) == EMU
            if os.path.isfile(cand) and (m.group(1) == '<' or (quoted_here and f in found.values())):
                if not os.path.basename(rel).lower().startswith('emu'):
                    found[rel] = cand
                    queue.append(cand)
    return found


def real_dirs(nvcc):
    """(where the real headers are looked for, the ones nvcc must be told of)"""
    cuda = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    extra = [os.path.join(os.environ[e], 'include') for e in ('NCCL_HOME', 'NCCL_ROOT') if os.environ.get(e)]
    dirs = [os.path.join(cuda, 'include'), os.path.join(cuda, 'include', 'cccl')] + extra + \
        ['/usr/local/include', '/usr/include']  # (nvcc's own, then the host compiler's)
    return [d for d in dirs if os.path.isdir(d)], [d for d in extra if os.path.isdir(d)]


# ---------------------------------------------------------------------------------------
# the checks: one per line, the same line in both translation units

HELPERS = r'''
#include <type_traits>
#include <cstddef>
// hdr_value<real, stand-in>: incomplete (an error naming both values) where they differ
template <long long R, long long S, bool = (R == S)> struct hdr_value;
template <long long R, long long S> struct hdr_value<R, S, true> { static constexpr bool ok = true; };
'''


class Check:
    def __init__(self, label, real, standin=None, header=None, hint=None):
        self.label, self.hint = label, hint
        self.real = real
        self.standin = real if standin is None else standin
        self.header = header
        self.errors = {}


def sig_text(ret, params, extra=(), member=None, const=False):
    ps = [p[0] for p in params] + list(extra)
    return '%s (%s*)(%s)%s' % (ret, member + '::' if member else '', ', '.join(ps), ' const' if const else '')


def subst(text, mapping):
    for k, v in mapping.items():
        text = re.sub(r'\b%s\b' % re.escape(k), v, text)
    return text


def make_checks(decls, macros_by_header, unknown):
    checks = []
    member_probes = set()
    for header, macros in macros_by_header.items():
        for name, params, body in macros:
            if is_emu(name):
                continue
            value = None if params else eval_int(tokenize(body), {}) if body else None
            if value is not None:
                checks.append(Check('#define %s %d' % (name, value), 'static_assert(hdr_value<(long long)(%s), %dLL>::ok, "%s");'
                                    % (name, value, name), header=header, hint='hdr_value<real, stand-in>'))
            else:
                checks.append(Check('#define %s%s (defined)' % (name, params or ''),
                                    '\n'.join(['#ifndef %s' % name, '#error "%s is not defined"' % name, '#endif']),
                                    header=header))
    for d in decls:
        h = d.header
        if d.kind == 'enumerator':
            line = 'static_assert(hdr_value<(long long)(%s), %dLL>::ok, "%s: the value");' % (d.name, d.value, d.name)
            if d.enum:
                line += ' static_assert(std::is_same<decltype(%s), %s>::value, "%s: not an enumerator of %s");' % (
                    d.name, d.enum, d.name, d.enum)
            checks.append(Check('enumerator %s = %d%s' % (d.name, d.value, ' of ' + d.enum if d.enum else ''), line, header=h,
                                hint='hdr_value<real, stand-in>'))
        elif d.kind == 'type':
            trait = {'enum': 'std::is_enum', 'class': 'std::is_class', 'pointer': 'std::is_pointer'}.get(d.what)
            if trait:
                line = 'static_assert(%s<%s>::value, "%s: not a%s %s");' % (trait, d.name, d.name,
                                                                          'n' if d.what == 'enum' else '', d.what)
            else:
                line = 'typedef %s hdr_type_%d;' % (d.name, len(checks))
            checks.append(Check('type %s (%s)' % (d.name, d.what), line, header=h))
        elif d.kind == 'struct':
            skip = DIFFERENT.get(d.name, set())
            if 'fields' not in skip:
                for fname, decl_text, ty, arr in d.fields:
                    ftype = ty + arr.replace(' ', '')
                    checks.append(Check('field %s::%s (%s)' % (d.name, fname, ftype),
                                        'static_assert(std::is_same<decltype(%s::%s), %s>::value, "%s::%s: the type");'
                                        % (d.name, fname, ftype, d.name, fname), header=h))
            else:
                for fname, decl_text, ty, arr in d.fields:
                    member_probes.add(fname)
                    checks.append(Check('%s has no member %s (the stand-in\'s own: allowlisted)' % (d.name, fname),
                                        'static_assert(!hdr_has_%s<%s>::value, "the real %s has a member %s");'
                                        % (fname, d.name, d.name, fname),
                                        'static_assert(hdr_has_%s<%s>::value, "the stand-in %s has no member %s");'
                                        % (fname, d.name, d.name, fname), header=h))
            if 'size' not in skip and d.fields:
                n = len(checks)
                fields = ' '.join('%s %s%s;' % (ty, f, arr.replace(' ', '')) for f, _, ty, arr in d.fields)
                conds = ['sizeof(%s) == sizeof(hdr_layout_%d)' % (d.name, n),
                         'alignof(%s) == alignof(hdr_layout_%d)' % (d.name, n)]
                if 'fields' not in skip:
                    conds += ['offsetof(%s, %s) == offsetof(hdr_layout_%d, %s)' % (d.name, f, n, f) for f, _, _, _ in d.fields]
                line = 'struct %shdr_layout_%d { %s }; static_assert(%s, "%s: size, alignment or offsets");' % (
                    'alignas(%s) ' % d.align if d.align else '', n, fields, ' && '.join(conds), d.name)
                checks.append(Check('layout of %s (size, alignment%s)' % (d.name, '' if 'fields' in skip else ', offsets'),
                                    line, header=h))
        elif d.kind == 'ctor':
            args = [p[0] for p in d.params]
            if len(args) == 1 and not d.explicit:
                cond = 'std::is_convertible<%s, %s>::value' % (args[0], d.cls)
                how = 'implicitly from %s' % args[0]
            else:
                cond = 'std::is_constructible<%s%s>::value' % (d.cls, ''.join(', ' + a for a in args))
                how = 'from (%s)' % ', '.join(args)
            checks.append(Check('constructor %s %s' % (d.cls, how), 'static_assert(%s, "%s: constructor");' % (cond, d.cls),
                                header=h))
        elif d.kind == 'conversion':
            src = ('const ' if d.const else '') + d.cls
            cond = ('std::is_constructible<%s, %s>::value' if d.explicit else 'std::is_convertible<%s, %s>::value') % (
                (d.to, src) if d.explicit else (src, d.to))
            checks.append(Check('conversion %s -> %s' % (src, d.to), 'static_assert(%s, "%s: conversion");' % (cond, d.cls),
                                header=h))
        elif d.kind == 'variable':
            checks.append(Check('variable %s (%s)' % (d.name, d.type),
                                'static_assert(std::is_same<std::remove_cv<decltype(%s)>::type, %s>::value, "%s: the type");'
                                % (d.name, d.type, d.name), header=h))
        elif d.kind == 'function':
            params = list(d.params)
            emu_only = []
            while params and is_source_location(params[-1][2]):
                emu_only.insert(0, params.pop())
            if any(p[0] == '...' for p in params):
                unknown.append((d.name, 'a variadic function', h))
                continue
            insts = [{}]
            if d.tparams:
                if any(k != 'type' or pack for k, _, pack in d.tparams):
                    unknown.append((d.name, 'a template with value or pack parameters', h))
                    continue
                insts = TEMPLATE_ARGS.get(d.name, [{n: 'float' for _, n, _ in d.tparams}])
            for inst in insts:
                ret = subst(d.ret, inst)
                ps = [(subst(p[0], inst),) + tuple(p[1:]) for p in params]
                real_sig = sig_text(ret, ps, (), d.member, d.const)
                standin_sig = sig_text(ret, ps, [p[0] for p in emu_only], d.member, d.const)
                label = '%s %s: %s' % ('member function' if d.member else 'function', d.name,
                                       re.sub(r'\((\w+::)?\*\)', d.name, real_sig, count=1))
                if inst:
                    label += ' [%s]' % ', '.join('%s = %s' % kv for kv in sorted(inst.items()))
                fmt = 'static_assert(sizeof(static_cast<%s>(&%s)) != 0, "%s: the signature");'
                checks.append(Check(label, fmt % (real_sig, d.name, d.name), fmt % (standin_sig, d.name, d.name), header=h,
                                    hint='no real declaration of %s has exactly this signature' % d.name))
    probes = ''.join('template <class T, class = void> struct hdr_has_%s : std::false_type {};\n'
                     'template <class T> struct hdr_has_%s<T, decltype((void)&T::%s)> : std::true_type {};\n'
                     % (m, m, m) for m in sorted(member_probes))
    return checks, probes


# ---------------------------------------------------------------------------------------
# compiling: one check per line, failing lines removed until the unit compiles

def write_unit(path, prologue, checks, which, skip):
    lines = prologue.split('\n')
    spans = []
    for idx, c in enumerate(checks):
        body = getattr(c, which).split('\n')
        start = len(lines) + 1
        if idx in skip:
            body = ['// (removed: failed)'] * len(body)
        lines.extend(body)
        spans.append((start, start + len(body) - 1))
    lines.append('int hdr_main_unused;')
    with open(path, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return spans


def error_lines(output, path):
    """{line of path: [messages]} for the errors the compiler reported, and the errors it
    attributes to no line of path"""
    base = re.escape(os.path.basename(path))
    at_line = re.compile(r'(?:^|[\s"/])%s(?:"?\((\d+)\)|:(\d+):\d+)' % base)
    ref_line = re.compile(r'at line (\d+) of "?[^"\n]*%s' % base)
    blocks, cur = [], None
    for line in output.split('\n'):
        if re.search(r'(\berror\b|: error:)', line) and not line.strip().startswith('detected during'):
            cur = [line]
            blocks.append(cur)
        elif cur is not None and line.strip():
            cur.append(line)
    found, loose = {}, []
    for b in blocks:
        ln = None
        for l in b:
            m = at_line.search(l)
            if m:
                ln = int(m.group(1) or m.group(2))
                break
            m = ref_line.search(l)
            if m:
                ln = int(m.group(1))
                break
        msg = re.sub(r'^.*?error:?\s*', '', b[0]).strip()
        if ln is None:
            if re.search(r'errors? detected in the compilation|compilation terminated', b[0]):
                continue
            loose.append(' '.join(x.strip() for x in b[:3]))
        else:
            found.setdefault(ln, []).append(msg)
    return found, loose


def compile_checks(cmd, path, prologue, checks, which, skip0):
    """{check index: messages} of the checks that failed in this unit; loose errors"""
    failed = {}
    skip = set(skip0)
    for _ in range(12):
        spans = write_unit(path, prologue, checks, which, skip)
        r = subprocess.run(cmd + [path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        if r.returncode == 0:
            return failed, []
        found, loose = error_lines(r.stdout, path)
        new = 0
        for ln, msgs in found.items():
            for idx, (a, b) in enumerate(spans):
                if a <= ln <= b and idx not in skip:
                    failed.setdefault(idx, []).extend(msgs)
                    skip.add(idx)
                    new += 1
        if new == 0:
            return failed, loose or [r.stdout.strip()[-2000:]]
    return failed, ['the unit still fails to compile after removing the failing checks']


def main():
    nvcc = shutil.which(os.environ.get('NVCC', 'nvcc'))
    if nvcc is not None:
        nvcc = os.path.realpath(nvcc)  # (nvcc finds its profile, hence cccl's headers, beside itself)
    if nvcc is None:
        print('SKIP CUDA headers: nvcc not found (the real headers come with the CUDA toolkit)')
        print('0 passed, 0 failed')
        return 0
    dirs, extra_dirs = real_dirs(nvcc)
    heads = stand_ins()
    reals, missing = {}, []
    for rel in sorted(heads):
        where = [d for d in dirs if os.path.isfile(os.path.join(d, rel))]
        if where:
            reals[rel] = os.path.join(where[0], rel)
        else:
            missing.append(rel)
    for rel in missing:
        print('SKIP %s: no real %s in %s' % (rel, rel, ' '.join(dirs)))
    if not reals:
        print('0 passed, 0 failed')
        return 0

    decls, unknown, macros = [], [], {}
    for rel in sorted(reals):
        text, defs = preprocess(open(heads[rel], encoding='utf-8').read())
        p = Parser(rel)
        try:
            p.scope(tokenize(text), [])
        except (ValueError, IndexError) as e:
            unknown.append(('the whole header', 'a header (%s) that' % e, rel))
        decls.extend(p.decls)
        unknown.extend((n, why, rel) for n, why in p.unknown)
        macros[rel] = defs
    checks, probes = make_checks(decls, macros, unknown)

    os.makedirs(OUT, exist_ok=True)
    includes = ''.join('#include <%s>\n' % rel for rel in sorted(reals))
    prologue = includes + HELPERS + probes
    # 1. against the stand-ins (g++): the parse read what the stand-ins declare
    mpi = subprocess.run(['mpicxx', '-showme:compile'], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout.split() if shutil.which('mpicxx') else []
    blas = [f for f in os.environ.get('BLAS_CFLAGS', '').split()] or \
        ['-I' + d for d in glob.glob('/usr/include/*/openblas-openmp')[:1]]
    gxx = [os.environ.get('CXX', 'g++'), '-std=c++17', '-fsyntax-only', '-D_GNU_SOURCE', '-DLLMC_EMU',
           '-I' + EMU, '-I' + ROOT] + mpi + blas
    standin_failed, loose1 = compile_checks(gxx, os.path.join(OUT, 'standin_check.cc'), prologue, checks, 'standin', set())
    # 2. against the real headers (nvcc), without the checks the stand-ins failed
    # (-cuda: nvcc's CUDA front end only, which sees the device functions' declarations too;
    # the host compiler after it would not)
    real_cmd = [nvcc, '-std=c++17', '-cuda', '-o', os.devnull] + ['-I' + d for d in extra_dirs]
    real_failed, loose2 = compile_checks(real_cmd, os.path.join(OUT, 'real_check.cu'), prologue, checks, 'real',
                                         set(standin_failed))
    passed = failed = 0
    for idx, c in enumerate(checks):
        where = '(%s)' % c.header
        if loose1 or loose2:  # a unit that never compiled verified nothing: no PASS
            if idx in standin_failed or idx in real_failed:
                failed += 1
                print('FAIL %s %s: %s' % (c.label, where, '; '.join(standin_failed.get(idx, real_failed.get(idx)))[:400]))
            continue
        if idx in standin_failed:
            failed += 1
            print('FAIL %s %s: the stand-in itself fails the check, the check misread it: %s'
                  % (c.label, where, '; '.join(standin_failed[idx])[:400]))
        elif idx in real_failed:
            failed += 1
            print('FAIL %s %s: %s%s' % (c.label, where, c.hint + ': ' if c.hint else '', '; '.join(real_failed[idx])[:400]))
        else:
            passed += 1
            print('PASS %s %s' % (c.label, where))
    for name, why, rel in unknown:
        failed += 1
        print('FAIL %s (%s): %s the check cannot compare (teach test/emu/check_headers.py, or name it emu_)'
              % (name, rel, why))
    for what, loose in (('stand-ins (g++)', loose1), ('real headers (nvcc)', loose2)):
        for msg in loose:
            failed += 1
            print('FAIL compiling the checks against the %s: %s' % (what, msg[:1500]))
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
