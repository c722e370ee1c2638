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
# and section markers (/* >>name --- */) are left alone.
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
