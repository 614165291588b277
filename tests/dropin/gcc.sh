# gcc: compiles a generated C file of 2000 functions with -O1 (gcc, cc1, as,
# collect2 and ld all run on ebb), links and runs it. The object file must be
# bit-identical with and without ebb, so its digest is part of the output.
set -e
command -v gcc >/dev/null || { echo "missing: gcc" >&2; exit 77; }
awk -v n=2000 'BEGIN {
  print "#include <stdio.h>"
  for (i = 0; i < n; i++) {
    printf "int f%d(int x) {\n  static const char name[] = \"f%d\";\n", i, i
    printf "  x = (x & 1) ? x * %d + 1 : x ^ %d;\n", i % 97, i * 7
    printf "  return x + name[x & 1];\n}\n"
  }
  printf "typedef int (*fn)(int);\nstatic const fn table[%d] = {", n
  for (i = 0; i < n; i++) printf "%sf%d", (i ? "," : ""), i
  print "};"
  print "int main(void) {"
  printf "  unsigned long sum = 0;\n  for (int r = 0; r < 20; r++)\n"
  printf "    for (int i = 0; i < %d; i++) sum = sum * 31 + (unsigned)table[i](r * %d + i);\n", n, n
  print "  printf(\"sum %lu\\n\", sum);\n  return 0;\n}"
}' > gen.c
$RUN gcc -O1 -c gen.c -o gen.o
md5sum gen.o
$RUN gcc gen.o -o gen
$RUN ./gen
