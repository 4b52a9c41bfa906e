#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks weft's public names against docs/api-conventions.md.

Reads the declarations of include/weft.h, include/weft_curl.h and
include/weft_tls.h (or the headers given) without a compiler: functions, typedefs, enum constants and
macros. Each rule the conventions state in a form a parser can check is
checked here; a name that breaks one is printed with the rule, and the
exit status is 1. The names of the block "Deprecated names" (between
#ifndef WEFT_NO_DEPRECATED and its #endif) are 0.2's: they are exempt, but
each must be marked deprecated. EXCEPTIONS lists the names the rules leave
alone for now, each with its reason; it is printed on every run.

Usage: scripts/api-names.py [HEADER...]   (default: the public headers)
       scripts/api-names.py --self-test   (feeds it bad declarations: each
                                           must be flagged, and a good
                                           header must pass)
"""
import os
import re
import sys
import tempfile

# Names the rules leave alone, each with its reason (printed every run).
EXCEPTIONS = {
    "weft_blocking_info": "a statistics struct whose name becomes "
    "weft_blocking_stats in 0.4, once the deprecated getter of that name "
    "(0.2's weft_blocking_stats) is gone",
    "weft_tls_free": "a TLS stream is made by its handshake, weft_tls_connect "
    "or weft_tls_accept (a client's or a server's: no one _new fits both), "
    "and has one owner, who frees it",
    "weft_file_open": "a file is a descriptor, as weft's sockets are: it "
    "makes an int, first (int *fd), and weft_file_close ends it",
}
# Enums of 0.1 whose constants do not carry the enum's name (WEFT_FAIL_FAST,
# WEFT_ONE_FOR_ONE, WEFT_PERMANENT): every program uses them, and the short
# names read well; new enums and new constants of other enums are checked.
ENUM_PREFIX_EXEMPT = {
    "weft_policy": "WEFT_FAIL_FAST, WEFT_COLLECT, ...: the policies' names",
    "weft_sup_strategy": "WEFT_ONE_FOR_ONE, ...: OTP's names",
    "weft_restart": "WEFT_PERMANENT, ...: OTP's names",
}
# Verbs that would be a second word for "destroy" (the conventions' four:
# _destroy, _free, _unref, and weft_close for descriptors).
FORBIDDEN_DESTRUCTORS = ("_delete", "_dispose", "_cleanup", "_fini",
                         "_deinit", "_finalize", "_drop")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"),
                  text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def split_deprecated(text):
    """Returns (text without the deprecated block, the block's text)."""
    lines = text.split("\n")
    out, block = [], []
    depth = None
    for line in lines:
        s = line.strip()
        if depth is None and re.match(r"#\s*ifndef\s+WEFT_NO_DEPRECATED\b", s):
            depth = 1
            continue
        if depth is not None:
            if re.match(r"#\s*if", s):
                depth += 1
            elif re.match(r"#\s*endif", s):
                depth -= 1
                if depth == 0:
                    depth = None
                    continue
            block.append(line)
            continue
        out.append(line)
    return "\n".join(out), "\n".join(block)


def macros_and_code(text):
    """Splits preprocessor lines (joined) from code; returns (macros, code).
    macros: list of (name, params or None, body)."""
    text = re.sub(r"\\\n", " ", text)
    # extern "C" { ... } under __cplusplus is not a scope of the API.
    text = re.sub(r'extern\s+"C"\s*\{', "", text)
    text = re.sub(r"#\s*ifdef\s+__cplusplus\s*\n\s*\}\s*\n", "#ifdef __cplusplus\n",
                  text)
    macros, code = [], []
    for line in text.split("\n"):
        s = line.strip()
        if s.startswith("#"):
            m = re.match(r"#\s*define\s+(\w+)(\(([^)]*)\))?\s*(.*)", s)
            if m:
                macros.append((m.group(1), m.group(3), m.group(4)))
            code.append("")
        else:
            code.append(line)
    return macros, "\n".join(code)


def balanced(text, i):
    """text[i] is '('; returns the index just after its ')'."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def split_top(s, sep=","):
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def param_of(p):
    """(type, name) of one parameter declaration."""
    p = " ".join(p.split())
    m = re.search(r"\(\s*\*\s*(\w+)\s*\)", p)  # function pointer
    if m:
        return p, m.group(1)
    m = re.match(r"(.*?)(\w+)\s*(\[[^\]]*\])?$", p)
    if not m or not m.group(1).strip():
        return p, ""
    return m.group(1).strip(), m.group(2)


class Api:
    def __init__(self):
        self.functions = {}  # name -> (ret, [(type, name)], file)
        self.typedefs = {}  # name -> file
        self.enums = []  # (enum name or None, [constants], file)
        self.macros = {}  # name -> (params, body, file)
        self.deprecated = {}  # name -> (marked, file)


def parse(paths):
    api = Api()
    for path in paths:
        raw = open(path, encoding="utf-8").read()
        text, block = split_deprecated(strip_comments(raw))
        parse_deprecated(api, block, path)
        macros, code = macros_and_code(text)
        for name, params, body in macros:
            api.macros[name] = (params, body, path)
        parse_code(api, code, path)
    return api


def parse_deprecated(api, block, path):
    _, code = macros_and_code(block)
    for m in re.finditer(r"((?:WEFT_DEPRECATED\s*\((?:[^()]|\([^()]*\))*\)\s*)?)"
                         r"static\s+inline\s+[\w\s\*]*?\b(weft_\w+)\s*\(",
                         code):
        api.deprecated[m.group(2)] = (bool(m.group(1)), path)
    for m in re.finditer(r"typedef\s[^;]*?\b(weft_\w+)\s*;", code):
        marked = "deprecated" in m.group(0) or "WEFT_DEPRECATED" in m.group(0)
        api.deprecated[m.group(1)] = (marked, path)


def parse_code(api, code, path):
    depth = 0
    i = 0
    stmt_start = 0
    n = len(code)
    while i < n:
        ch = code[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            stmt = code[stmt_start:i + 1]
            handle_statement(api, stmt, path)
            stmt_start = i + 1
        i += 1


def handle_statement(api, stmt, path):
    s = " ".join(stmt.split())
    if not s or s == ";":
        return
    if s.startswith("typedef ") or re.match(r"enum\s*\{", s):
        # enum constants
        for m in re.finditer(r"enum\s*(\w*)\s*\{(.*?)\}", s):
            consts = []
            for item in split_top(m.group(2)):
                c = re.match(r"(\w+)", item)
                if c:
                    consts.append(c.group(1))
            tname = m.group(1) or None
            if s.startswith("typedef "):
                t = re.search(r"\}\s*(\w+)\s*;$", s)
                if t:
                    tname = t.group(1)
            api.enums.append((tname, consts, path))
        if s.startswith("typedef "):
            if "}" in s:  # typedef struct/enum X {...} name;
                m = re.search(r"\}\s*(\w+)\s*;$", s)
                if m:
                    api.typedefs[m.group(1)] = path
                return
            m = re.search(r"\(\s*\*\s*(\w+)\s*\)\s*\(", s)
            if m:
                api.typedefs[m.group(1)] = path
            else:
                m = re.search(r"(\w+)\s*;$", s)
                if m:
                    api.typedefs[m.group(1)] = path
        return
    # A function declaration: TYPE name(params);
    m = re.search(r"\b(weft_\w+)\s*\(", s)
    if not m or not s.endswith(");"):
        return
    end = balanced(s, m.end() - 1)
    if s[end:].strip() != ";":
        return
    ret = s[:m.start()].replace("WEFT_EXTERN", "").strip()
    if "(" in ret or "{" in ret or "}" in ret:
        return
    inner = s[m.end():end - 1]
    params = [] if inner.strip() in ("", "void") else [
        param_of(p) for p in split_top(inner)]
    api.functions[m.group(1)] = (ret, params, path)


def check(api):
    bad = []

    def flag(name, rule, why):
        bad.append((name, rule, why))

    fnames = set(api.functions) | set(api.macros) | set(api.deprecated)
    types = set(api.typedefs)

    # Spelling: weft_ for functions and types, WEFT_ for macros and
    # constants; lower-case macros only as call wrappers (__FILE__).
    for f in list(api.functions) + list(api.typedefs):
        if not re.fullmatch(r"weft_[a-z0-9]+(_[a-z0-9]+)*", f):
            flag(f, "spelling", "functions and types are weft_lower_snake "
                 "(no '__': that is the internal prefix)")
    for mname, (params, body, _) in api.macros.items():
        if mname in ("WEFT_H", "WEFT_CURL_H"):
            continue
        if re.fullmatch(r"WEFT_[A-Z0-9]+(_[A-Z0-9]+)*", mname):
            continue
        if re.fullmatch(r"weft_[a-z0-9_]+", mname) and params is not None \
                and "__FILE__" in body:
            continue
        flag(mname, "spelling", "macros are WEFT_UPPER_SNAKE (a lower-case "
             "one only wraps a call to pass the call site, __FILE__)")
    for ename, consts, _ in api.enums:
        for c in consts:
            if not re.fullmatch(r"WEFT_[A-Z0-9]+(_[A-Z0-9]+)*", c):
                flag(c, "spelling", "enum constants are WEFT_UPPER_SNAKE")
        if ename and ename not in ENUM_PREFIX_EXEMPT:
            prefix = "WEFT_" + ename[len("weft_"):].split("_")[0].upper() + "_"
            for c in consts:
                if not c.startswith(prefix):
                    flag(c, "enum", "a constant of %s starts with %s"
                         % (ename, prefix))
    for mname, (params, body, _) in api.macros.items():
        if mname.endswith("_INIT") and mname != "WEFT_INIT":
            t = "weft_" + mname[len("WEFT_"):-len("_INIT")].lower()
            if t not in types:
                flag(mname, "init", "an initialiser macro is WEFT_<TYPE>_INIT "
                     "for the type weft_<type> (%s is no type)" % t)

    for f, (ret, params, _) in api.functions.items():
        pnames = [p[1] for p in params]
        ptypes = [p[0] for p in params]
        # Try forms: weft_X_try_VERB (weft_try_VERB without an object),
        # next to the waiting weft_X_VERB; never a deadline.
        if any(seg.startswith("try") for seg in f.split("_")):
            m = re.fullmatch(r"(weft(?:_[a-z0-9]+)*?)_try_([a-z0-9_]+)", f)
            if not m:
                flag(f, "try", "a try form is weft_X_try_VERB (try_ before "
                     "the verb, as weft_chan_try_send)")
            else:
                wait = m.group(1) + "_" + m.group(2)
                if wait not in fnames and wait + "_until" not in fnames:
                    flag(f, "try", "a try form sits next to the call that "
                         "waits, %s, which is missing" % wait)
                if "deadline" in pnames:
                    flag(f, "try", "a try form never waits: no deadline")
        # Deadlines: weft_time deadline, the last parameter.
        for t, n in params:
            if t == "weft_time" and n != "deadline":
                flag(f, "deadline", "a weft_time parameter is a deadline "
                     "named deadline (%s)" % n)
            if n == "deadline" and t != "weft_time":
                flag(f, "deadline", "a deadline is a weft_time")
        if "deadline" in pnames and pnames[-1] != "deadline":
            flag(f, "deadline", "the deadline is the last parameter")
        if f.endswith("_until"):
            base = f[:-len("_until")]
            if not pnames or pnames[-1] != "deadline":
                flag(f, "until", "an _until form takes the deadline last")
            if base not in fnames and base + "_for" not in fnames:
                flag(f, "until", "an _until form is the twin of %s, which "
                     "is missing" % base)
        elif f + "_until" in api.functions and "deadline" in pnames:
            flag(f, "until", "the twin of %s_until waits without a "
                 "deadline" % f)
        # Relative timeouts: int64_t ..._ns, last, in a call named _for.
        for t, n in params:
            if n == "timeout_ns" and not f.endswith("_for"):
                flag(f, "for", "a call that takes a relative timeout is "
                     "named _for")
        if f.endswith("_for"):
            if not params or params[-1][0] != "int64_t" or \
                    not params[-1][1].endswith("ns"):
                flag(f, "for", "a _for form takes an int64_t duration in "
                     "ns last")
        # Constructors and destructors.
        if (f.endswith("_new") or f.endswith("_open")) and \
                f not in EXCEPTIONS:
            if not ptypes or not re.fullmatch(r"weft_\w+ \*\*", ptypes[0]):
                flag(f, "out", "a constructor takes the object it makes "
                     "first (weft_X **out)")
        if f.endswith("_spawn") and f != "weft_spawn":
            if not ptypes or not ptypes[-1].endswith("**"):
                flag(f, "out", "a _spawn takes its scope first and the "
                     "handle it makes last (weft_X **out)")
        for verb in FORBIDDEN_DESTRUCTORS:
            if f.endswith(verb):
                flag(f, "destroy", "destructor verbs are _destroy (embedded "
                     "values), _free (owned), _unref (shared)")
        obj = re.match(r"weft_([a-z0-9]+)_", f)
        obj = obj.group(1) if obj else None
        if obj and f == "weft_%s_unref" % obj:
            if "weft_%s_ref" % obj not in fnames:
                flag(f, "destroy", "_unref drops what _ref takes: "
                     "weft_%s_ref is missing" % obj)
        if obj and f == "weft_%s_destroy" % obj:
            if "weft_%s_init" % obj not in fnames and \
                    "WEFT_%s_INIT" % obj.upper() not in api.macros:
                flag(f, "destroy", "_destroy ends what _init (or WEFT_X_INIT) "
                     "began: neither exists")
        if obj and f == "weft_%s_free" % obj and f not in EXCEPTIONS:
            if not any("weft_%s_%s" % (obj, c) in fnames
                       for c in ("new", "open", "spawn")):
                flag(f, "destroy", "_free frees what _new, _open or _spawn "
                     "made: none exists")
        # Statistics: int weft_X_stats_get(X *, weft_X_stats *out).
        if "stats" in f or f.endswith("_counts"):
            m = re.fullmatch(r"weft_((?:[a-z0-9]+_)*?)stats_get", f)
            if not m:
                flag(f, "stats", "statistics are read by "
                     "weft_X_stats_get(X *, weft_X_stats *out)")
            else:
                want = "weft_%sstats" % m.group(1)
                outs = [t for t in ptypes if t.endswith("*")]
                tnames = [t.rstrip(" *").replace("const ", "") for t in outs]
                if want not in tnames and not any(t in EXCEPTIONS
                                                  for t in tnames):
                    flag(f, "stats", "fills a %s" % want)
                objtype = "weft_" + m.group(1).rstrip("_")
                if m.group(1) and objtype in types and (
                        not ptypes or objtype not in ptypes[0]):
                    flag(f, "stats", "takes its %s first" % objtype)
        # Waiting for an end with a status is a join.
        if (f.endswith("_wait") or f.endswith("_wait_until")) and \
                ("status" in pnames):
            flag(f, "join", "waiting for an end and its status is _join "
                 "(and _join_until)")
        # Options structs.
        for t, n in params:
            if n == "opts" and not re.search(r"weft_\w+_opts\b", t):
                flag(f, "opts", "an options parameter is a weft_X_opts")
    for t in api.typedefs:
        if t.endswith("_options") or t.endswith("_cfg") or t.endswith("_attr"):
            flag(t, "opts", "options structs are weft_X_opts")
    for name, (marked, _) in api.deprecated.items():
        if not marked:
            flag(name, "deprecated", "a name of the deprecated block is "
                 "marked WEFT_DEPRECATED(\"use ...\")")
        if name in api.functions or name in api.typedefs:
            flag(name, "deprecated", "a deprecated name is declared outside "
                 "the deprecated block too")
    return bad


def run(paths, quiet=False):
    api = parse(paths)
    bad = check(api)
    if not quiet:
        for name, why in sorted(EXCEPTIONS.items()):
            print("api-names: exception: %s: %s" % (name, why))
    if not quiet:
        for name, rule, why in bad:
            print("api-names: %s: %s (rule: %s)" % (name, why, rule))
        print("api-names: %d functions, %d types, %d constants, %d macros, "
              "%d deprecated names: %s"
              % (len(api.functions), len(api.typedefs),
                 sum(len(c) for _, c, _ in api.enums), len(api.macros),
                 len(api.deprecated), "ok" if not bad else
                 "%d problem(s)" % len(bad)))
    return bad


GOOD = r'''
#define WEFT_EXTERN
typedef int64_t weft_time;
typedef int (*weft_fn)(void *arg);
typedef struct weft_thing weft_thing;
typedef struct weft_thing_opts { int n; } weft_thing_opts;
typedef struct weft_thing_stats { long n; } weft_thing_stats;
typedef struct weft_lock { unsigned char opaque[8]; } weft_lock;
#define WEFT_LOCK_INIT {{0}}
typedef enum weft_op {
    WEFT_OP_SEND = 1,
    WEFT_OP_TIMER = 9, /* a select op added later */
} weft_op;
WEFT_EXTERN int weft_thing_new(weft_thing **out, const weft_thing_opts *opts);
WEFT_EXTERN weft_thing *weft_thing_ref(weft_thing *t);
WEFT_EXTERN int weft_thing_unref(weft_thing *t);
WEFT_EXTERN int weft_thing_send(weft_thing *t, const void *v);
WEFT_EXTERN int weft_thing_send_until(weft_thing *t, const void *v,
                                      weft_time deadline);
WEFT_EXTERN int weft_thing_try_send(weft_thing *t, const void *v);
WEFT_EXTERN int weft_thing_stats_get(weft_thing *t, weft_thing_stats *out);
WEFT_EXTERN int weft_thing_read(weft_thing *t, void *buf, weft_time deadline);
WEFT_EXTERN int weft_lock_lock(weft_lock *l);
WEFT_EXTERN int weft_lock_try_lock(weft_lock *l);
WEFT_EXTERN int weft_lock_destroy(weft_lock *l);
WEFT_EXTERN int weft_call_for(weft_fn fn, void *arg, int64_t timeout_ns);
WEFT_EXTERN int weft_spawn_at(weft_fn fn, const char *file, int line);
#define weft_spawn(fn) weft_spawn_at((fn), __FILE__, __LINE__)
#ifndef WEFT_NO_DEPRECATED
WEFT_DEPRECATED("weft_lock_try_lock")
static inline int weft_lock_trylock(weft_lock *l) { return weft_lock_try_lock(l); }
#endif
'''

# Each bad declaration, added to GOOD, must be flagged (name, rule).
BAD = [
    ("WEFT_EXTERN int weft_lock_trylock2(weft_lock *l);", "weft_lock_trylock2", "try"),
    ("WEFT_EXTERN int weft_thing_try(weft_thing *t);", "weft_thing_try", "try"),
    ("WEFT_EXTERN int weft_thing_try_recv(weft_thing *t, void *v);",
     "weft_thing_try_recv", "try"),
    ("WEFT_EXTERN int weft_thing_recv(weft_thing *t, weft_time deadline, void *out);",
     "weft_thing_recv", "deadline"),
    ("WEFT_EXTERN int weft_thing_wait(weft_thing *t, weft_time when);",
     "weft_thing_wait", "deadline"),
    ("WEFT_EXTERN int weft_thing_pop_until(weft_thing *t, void *out, weft_time deadline);",
     "weft_thing_pop_until", "until"),
    ("WEFT_EXTERN int weft_with_timeout(int64_t timeout_ns, weft_fn fn, void *arg);",
     "weft_with_timeout", "for"),
    ("WEFT_EXTERN int weft_thing_make_new(const weft_thing_opts *opts, weft_thing **out);",
     "weft_thing_make_new", "out"),
    ("WEFT_EXTERN int weft_thing_delete(weft_thing *t);", "weft_thing_delete", "destroy"),
    ("WEFT_EXTERN int weft_thing_counts(weft_thing *t, int *n);", "weft_thing_counts", "stats"),
    ("WEFT_EXTERN int weft_thing_stats(weft_thing *t, weft_thing_stats *out);",
     "weft_thing_stats", "stats"),
    ("WEFT_EXTERN int weft_thing_wait(weft_thing *t, int *status, weft_time deadline);",
     "weft_thing_wait", "join"),
    ("WEFT_EXTERN int weft_Thing_Go(weft_thing *t);", "weft_Thing_Go", "spelling"),
    ("WEFT_EXTERN int weft__thing_go(weft_thing *t);", "weft__thing_go", "spelling"),
    ("#define WEFT_Bad_Macro 1", "WEFT_Bad_Macro", "spelling"),
    ("#define weft_go(t) weft_thing_send((t), 0)", "weft_go", "spelling"),
    ("typedef enum weft_op2 { WEFT_OP2_A = 1, WEFT_SELECT_TIMER = 2 } weft_op2;",
     "WEFT_SELECT_TIMER", "enum"),
    ("typedef struct weft_thing_options { int n; } weft_thing_options;",
     "weft_thing_options", "opts"),
    ("#define WEFT_WIDGET_INIT {0}", "WEFT_WIDGET_INIT", "init"),
    ("WEFT_EXTERN int weft_thing_spawn(weft_thing **out, weft_fn fn);",
     "weft_thing_spawn", "out"),
    # A select op added to weft_op without the enum's prefix.
    ("WEFT_OP_TIMER = 9,", "WEFT_SELECT_TIMER = 9,", "WEFT_SELECT_TIMER", "enum"),
    ("#ifndef WEFT_NO_DEPRECATED\nstatic inline int weft_thing_old(void) { return 0; }\n#endif",
     "weft_thing_old", "deprecated"),
]


def self_test():
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "good.h")
        with open(good, "w") as f:
            f.write(GOOD)
        bad = run([good], quiet=True)
        if bad:
            print("self-test: the good header is flagged:")
            for name, rule, why in bad:
                print("  %s: %s (rule: %s)" % (name, why, rule))
            failures += 1
        else:
            print("self-test: a good header (with a new select op, "
                  "WEFT_OP_TIMER) passes")
        for case in BAD:
            h = os.path.join(d, "bad.h")
            if len(case) == 4:  # a line of GOOD changed
                old, new, name, rule = case
                text = GOOD.replace(old, new)
            else:  # a declaration added
                decl, name, rule = case
                text = GOOD.replace("#ifndef WEFT_NO_DEPRECATED",
                                    decl + "\n#ifndef WEFT_NO_DEPRECATED")
            with open(h, "w") as f:
                f.write(text)
            got = run([h], quiet=True)
            hit = [(n, r, w) for n, r, w in got if n == name and r == rule]
            if hit:
                print("self-test: flagged %-22s rule %-10s %s"
                      % (name, rule, hit[0][2]))
            else:
                print("self-test: NOT flagged %s (rule %s): %s"
                      % (name, rule, got))
                failures += 1
    print("self-test: %s" % ("ok" if not failures else "%d failure(s)"
                             % failures))
    return failures


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return 1 if self_test() else 0
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    paths = argv[1:] or [os.path.join(root, "include", "weft.h"),
                         os.path.join(root, "include", "weft_curl.h"),
                         os.path.join(root, "include", "weft_tls.h")]
    return 1 if run(paths) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
