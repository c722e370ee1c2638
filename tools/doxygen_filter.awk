# tools/doxygen_filter.awk - Doxygen's INPUT_FILTER for the headers (make docs).
#
# The headers document with plain /* ... */ comments: the comment directly
# above a declaration (no blank line between) says what it is, a comment at
# the end of a struct field or enum value describes that member, and the
# top comment of a header is its manual. This filter turns exactly those
# into Doxygen comments (/** ... */, /**< ... */, \file) on the way into
# Doxygen, so the headers stay plain C. It never adds or removes a line,
# so Doxygen's line numbers are the header's. Text inside the converted
# comments is escaped (\ @ < > & # %) so that Doxygen prints it as written
# instead of reading it as commands or HTML. Comments inside function bodies
# and section markers (/* >>name --- */) are left alone. Functions that a
# macro generates get documented prototypes on the line of the macro's use
# (the op list's, blas.h's *_PUBLIC generator); uses of private generator
# macros (DL__*) become blank lines. Run from the repository root (the op
# list is read from include/dl/expr.h).
#
#   awk -f tools/doxygen_filter.awk include/dl/core.h
function esc(s,   r, i, ch) {
  # one character at a time: awks differ on backslashes in gsub replacements
  r = ""
  for (i = 1; i <= length(s); i++) {
    ch = substr(s, i, 1)
    if (index("\\@<>&#%$", ch)) r = r "\\" ch; else r = r ch
  }
  return r
}
# the text of a comment line escaped, its /* opener (if any) replaced by `open`
function conv(s, open,   p, pre, body, q) {
  p = index(s, "/*")
  if (open != "" && p > 0) { pre = substr(s, 1, p - 1); body = substr(s, p + 2) } else { pre = ""; body = s }
  q = index(body, "*/")
  if (q > 0) body = esc(substr(body, 1, q - 1)) "*/" substr(body, q + 2)
  else body = esc(body)
  # a leading " * " stays as it is (esc leaves * alone)
  return (open != "" && p > 0) ? pre open body : body
}
# code of a line with comments and string/char literals removed, for brace counting
function code(s) {
  gsub(/"([^"\\]|\\.)*"/, "\"\"", s); gsub(/'([^'\\]|\\.)*'/, "''", s)
  gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, " ", s); sub(/\/\*.*$/, "", s); sub(/\/\/.*$/, "", s)
  return s
}
# a struct field line that declares several names (`double lr, eps;`): one
# comment documents them all, through a member group (DISTRIBUTE_GROUP_DOC)
function multi(s,   c) {
  c = code(s)
  return agg && depth == 1 && c !~ /\(/ && c ~ /,/ && c ~ /;[ \t]*$/
}
# the entries X(name, expression) of expr.h's lists, read once:
# OPS[list, k] = name, OPX[list, k] = expression, OPN[list] = count
function oplists(   f, line, list, name, ex) {
  if (OPLOADED++) return
  f = "include/dl/expr.h"
  while ((getline line < f) > 0) {
    if (line ~ /^#define DL_OPS_(UNARY|UNARY_P|BINARY)\(X\)/) { list = line; sub(/^#define /, "", list); sub(/\(X\).*$/, "", list); continue }
    if (list == "") continue
    if (line ~ /^[ \t]*X\(/) {
      name = line; sub(/^[ \t]*X\(/, "", name); sub(/,.*$/, "", name)
      ex = line; sub(/^[ \t]*X\([a-z_0-9]+,[ \t]*/, "", ex); sub(/[ \t]*\\?[ \t]*$/, "", ex); sub(/\)$/, "", ex)
      OPS[list, ++OPN[list]] = name; OPX[list, OPN[list]] = ex
    }
    if (line !~ /\\[ \t]*$/) list = ""
  }
  close(f)
}
function oplist(s,   list, gen, k, n, e, r, p) {
  oplists()
  list = s; sub(/\(.*$/, "", list)
  gen = s; sub(/^[^(]*\(/, "", gen); sub(/\).*$/, "", gen)
  p = (gen ~ /P$/) ? ", double p0" : ""
  r = ""
  for (k = 1; k <= OPN[list]; k++) {
    n = OPS[list, k]; e = esc(OPX[list, k])
    if (gen == "DL__LIB_OP1" || gen == "DL__LIB_OP1P")
      r = r "/** y = f(x0) = " e ", element by element, x0 broadcast to y (expr.h's op list). */ " \
          "void dl_" n "_into(dl_tensor *y, const dl_tensor *x0_" p "); " \
          "/** gx0 += gy * df/dx0 for f(x0) = " e ", summed to x0's shape; a NULL gx0 is skipped. */ " \
          "void dl_" n "_backward(dl_tensor *gx0, const dl_tensor *gy, const dl_tensor *x0_" p "); " \
          "/** Forward mode of f(x0) = " e ": ty = df/dx0 * tx0. */ " \
          "void dl_" n "_jvp(dl_tensor *ty, const dl_tensor *x0_, const dl_tensor *tx0_" p "); "
    else if (gen == "DL__LIB_OP2")
      r = r "/** y = f(x0, x1) = " e ", element by element, both broadcast to y (expr.h's op list). */ " \
          "void dl_" n "_into(dl_tensor *y, const dl_tensor *x0_, const dl_tensor *x1_); " \
          "/** gx0 += gy * df/dx0, gx1 += gy * df/dx1 for f = " e ", each summed to its input's shape; a NULL one is skipped. */ " \
          "void dl_" n "_backward(dl_tensor *gx0, dl_tensor *gx1, const dl_tensor *gy, const dl_tensor *x0_, const dl_tensor *x1_); " \
          "/** Forward mode of f = " e ": ty = df/dx0 * tx0 + df/dx1 * tx1. */ " \
          "void dl_" n "_jvp(dl_tensor *ty, const dl_tensor *x0_, const dl_tensor *tx0_, const dl_tensor *x1_, const dl_tensor *tx1_); "
    else if (gen == "DL__T_LIB1" || gen == "DL__T_LIB1P")
      r = r "/** y = " e " with x0 = x" (p != "" ? " and the number p0" : "") ", on the tape: dl_" n "_into forward, its backward and forward-mode rules from the same expression. */ " \
          "dl_tensor *dl_t_" n "(dl_tape *tp, dl_tensor *x" p "); "
    else
      r = r "/** y = " e " with x0 = a, x1 = b (broadcast), on the tape: dl_" n "_into forward, its backward and forward-mode rules from the same expression. */ " \
          "dl_tensor *dl_t_" n "(dl_tape *tp, dl_tensor *a, dl_tensor *b); "
  }
  return r
}
# whole-word replacement of identifier w by r in s (and the pasted forms ##w, w##)
function subword(s, w, r,   out, pre, post) {
  gsub("##" w, r, s); gsub(w "##", r, s)
  out = ""
  while (match(s, "(^|[^A-Za-z0-9_])" w "([^A-Za-z0-9_]|$)")) {
    pre = substr(s, 1, RSTART - 1); post = substr(s, RSTART, RLENGTH)
    out = out pre; s = substr(s, RSTART + RLENGTH)
    sub(w, r, post); out = out substr(post, 1, length(post) - 1); s = substr(post, length(post)) s
  }
  return out s
}
# A generator of public functions, #define NAME_PUBLIC(params) ... (blas.h's
# DL__GEMM_DEFINE_PUBLIC), used at file scope as NAME_PUBLIC(args): each
# DL_API declaration of its body, with the comment before it and the
# arguments substituted, becomes a documented prototype on the line of the
# use, so that the generated functions have entries.
function public_gen(s,   name, args, k, j, n, np, a, P, line, cm, incm, decl, indecl, r, t) {
  name = s; sub(/\(.*$/, "", name)
  if (!(name in GEN_AT)) return ""
  args = s; sub(/^[^(]*\(/, "", args); sub(/\)[^)]*$/, "", args)
  n = split(args, a, /[ \t]*,[ \t]*/); np = split(GEN_PARAMS[name], P, /[ \t]*,[ \t]*/)
  r = ""; cm = ""; incm = 0; decl = ""; indecl = 0
  for (k = GEN_AT[name] + 1; k <= NR; k++) {
    line = L[k]; sub(/\\[ \t]*$/, "", line)
    if (!incm && !indecl && line ~ /^[ \t]*\/\*/) { incm = 1; cm = "" }
    if (incm) {
      t = line; sub(/^[ \t]*\/\*+/, "", t); sub(/^[ \t]*\*[ \t]?/, "", t); sub(/\*\/.*$/, "", t)
      cm = cm " " t
      if (index(line, "*/")) incm = 0
    } else if (line ~ /^[ \t]*DL_API/ || indecl) {
      indecl = 1; t = line; sub(/^[ \t]+/, "", t); decl = decl " " t
      if (index(decl, "{")) {
        sub(/[ \t]*\{.*$/, "", decl); sub(/^ DL_API /, "", decl)
        for (j = 1; j <= np && j <= n; j++) decl = subword(decl, P[j], a[j])
        gsub(/[ \t]+/, " ", decl); gsub(/[ \t]+/, " ", cm)
        r = r "/**" esc(cm) " */ " decl "; "
        decl = ""; indecl = 0; cm = ""
      }
    }
    if (L[k] !~ /\\[ \t]*$/) break
  }
  return r
}
function count(s, ch,   n, i) { n = 0; for (i = 1; i <= length(s); i++) if (substr(s, i, 1) == ch) n++; return n }
# a line that starts something Doxygen documents (not a preprocessor
# conditional, not a closing brace, not a blank line or another comment)
function decl(s) {
  if (s ~ /^[ \t]*$/) return 0
  if (s ~ /^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif|include|undef|pragma|error)/) return 0
  if (s ~ /^[ \t]*(\}|\/\*|\/\/)/) return 0
  if (s ~ /^[ \t]*(extern "C"|DL__HEADER_(BEGIN|END))/) return 0
  return 1
}
{ L[NR] = $0 }
END {
  for (i = 1; i <= NR; i++)
    if (L[i] ~ /^#[ \t]*define[ \t]+[A-Z_0-9]+_PUBLIC\(/) {
      t = L[i]; sub(/^#[ \t]*define[ \t]+/, "", t); n = t; sub(/\(.*$/, "", n)
      sub(/^[^(]*\(/, "", t); sub(/\).*$/, "", t)
      GEN_AT[n] = i; GEN_PARAMS[n] = t
    }
  depth = 0; agg = 0; incom = 0; first = 1
  for (i = 1; i <= NR; i++) {
    s = L[i]
    if (incom) {               # inside a comment already decided
      if (mode == "") print s; else print conv(s, "")
      if (index(s, "*/")) incom = 0
      continue
    }
    if (s ~ /^[ \t]*\/\*/ && s !~ /^[ \t]*\/\*[*!]/) {
      # a comment that starts the line: where does it end, and what follows?
      for (j = i; j <= NR && !index(j == i ? substr(L[j], index(L[j], "/*") + 2) : L[j], "*/"); j++) ;
      after = L[j]; sub(/^.*\*\//, "", after)
      mode = ""
      if (first && i == 1) mode = "file"
      else if (after ~ /^[ \t]*$/ && j < NR && s !~ /\/\* >>/ && (depth == 0 || agg)) {
        # the declaration may come after a guard or two (/* ... */ #ifndef
        # DL_X / #define DL_X) or a private DL__GLOBAL(...) line
        for (k = j + 1; k <= j + 3 && (L[k] ~ /^#[ \t]*(if|ifdef|ifndef|include)[ \t]/ || L[k] ~ /^DL__GLOBAL\(/); k++) ;
        if (decl(L[k])) mode = "doc"
      }
      first = 0
      if (mode == "file") {
        # the header's manual: \file goes at its end, before */
        for (k = i; k <= j; k++) {
          t = conv(L[k], k == i ? "/**" : "")
          if (k == j) sub(/\*\/[ \t]*$/, "\\file */", t)
          print t
        }
        i = j; continue
      }
      if (mode == "doc") {
        g = multi(L[j + 1])
        for (k = i; k <= j; k++) print conv(L[k], k == i ? (g ? "/**@{*/ /**" : "/**") : "")
        if (g) close_group[j + 1] = 1
        i = j; continue
      }
      for (k = i; k <= j; k++) print L[k]
      i = j; continue
    }
    first = 0
    # the op list's instantiations (expr.h: dl_NAME_into / _backward / _jvp;
    # ops/core.h: dl_t_NAME): one documented prototype per entry of the
    # list, all on this line, so that each generated function has an entry
    # (tests/docs_listings.sh compiles these prototypes against dl.h)
    if (s ~ /^DL_OPS_(UNARY|UNARY_P|BINARY)\((DL__LIB_OP1|DL__LIB_OP1P|DL__LIB_OP2|DL__T_LIB1|DL__T_LIB1P|DL__T_LIB2)\)/) {
      print oplist(s); continue
    }
    if (depth == 0 && s ~ /^[A-Z_0-9]+_PUBLIC\(/ && (t = public_gen(s)) != "") { print t; continue }
    # a struct on one line with its fields' comment inside:
    #   typedef struct dl_dual { float v, d; /* value, derivative */ } dl_dual;
    if (depth == 0 && s ~ /struct[ \t]+[A-Za-z_0-9]+[ \t]*\{[^{}]*;[ \t]*\/\*[^*]*\*\/[ \t]*\}/) {
      t = s; sub(/\/\*/, "/**<", t); sub(/\*\/[ \t]*\}/, "*/ /**@}*/ }", t); sub(/\{/, "{ /**@{*/", t)
      print t; continue
    }
    # a file-scope use of a private generator macro (DL__OPTIM_KERNEL(...),
    # DL__SCALAR_FUNCS(...), a layer's DL__GLOBAL vtable): private code
    # Doxygen would misread as declarations; it becomes blank lines, and a
    # comment above it documents the declaration after it
    if (depth == 0 && s ~ /^DL__[A-Z0-9_]+\(/ && s !~ /^DL__HEADER_/) {
      for (par = 0; i <= NR; i++) {
        c = code(L[i]); par += count(c, "(") - count(c, ")"); print ""
        if (par <= 0) break
      }
      continue
    }
    c = code(s)
    opens = count(c, "{"); closes = count(c, "}")
    # extern "C" { ... } of the C++ guards is no block
    if (s ~ /^[ \t]*extern "C"/ || (c ~ /^[ \t]*\}[ \t]*$/ && L[i - 1] ~ /^#[ \t]*ifdef[ \t]+__cplusplus/)) opens = closes = 0
    # a member's trailing comment inside a struct/enum, or after a #define at file level
    p = index(s, "/*")
    # (a line that closes a nested union, "} cfg; /* ... */", is a member too)
    if (p > 1 && substr(s, p, 3) != "/**" && ((agg && (depth == 1 || (depth == 2 && s ~ /^[ \t]*\}/))) || (depth == 0 && s ~ /^#[ \t]*define[ \t]+(DL|DLM|dl|dlm)_/)) &&
        substr(s, 1, p - 1) ~ /[;,][ \t]*$|^[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*(=[^;]*)?[ \t]*$|^#[ \t]*define/) {
      t = substr(s, 1, p - 1) "/**<" conv(substr(s, p + 2), "")
      if (multi(s) && index(substr(s, p + 2), "*/")) t = "/**@{*/ " t " /**@}*/"
      print t
      if (!index(substr(s, p + 2), "*/")) { incom = 1; mode = "doc" }
    } else print s (close_group[i] ? " /**@}*/" : "")
    if (depth == 0 && opens > closes && c ~ /(struct|enum|union)([ \t]+[A-Za-z_][A-Za-z0-9_]*)?[ \t]*\{/ && c !~ /\(/) agg = 1
    depth += opens - closes
    if (depth <= 0) { depth = 0; agg = 0 }
  }
}
