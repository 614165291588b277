/* `make install PREFIX=… DESTDIR=…` installs the libraries, the header and an
 * ebb.pc that a program can build against with pkg-config. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "helpers.h"

Test(install, destdir_tree_builds_a_program_through_pkg_config, .timeout = 120) {
  struct cmd_result *r = malloc(sizeof *r);
  cr_assert_not_null(r);
  char dest[512];
  snprintf(dest, sizeof dest, "%s/install-%d", tmp_dir(), (int)getpid());
  int st = run_cmd(r, "make -s install PREFIX=/opt/ebb DESTDIR='%s'", dest);
  cr_assert_eq(st, 0, "make install failed: %s%s", r->out, r->err);
  const char *files[] = {"lib/libebb.so.0", "lib/libebb.so", "lib/libebb.a", "include/ebb.h", "lib/pkgconfig/ebb.pc"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    st = run_cmd(r, "test -e '%s/opt/ebb/%s'", dest, files[i]);
    cr_assert_eq(st, 0, "%s was not installed", files[i]);
  }
  /* pkg-config answers for the prefix; the sysroot maps it into the DESTDIR staging tree */
  st = run_cmd(r,
               "flags=$(PKG_CONFIG_SYSROOT_DIR='%s' PKG_CONFIG_LIBDIR='%s/opt/ebb/lib/pkgconfig' "
               "pkg-config --cflags --libs ebb) && echo \"$flags\" && "
               "cc tests/programs/installed.c $flags -Wl,-rpath,'%s/opt/ebb/lib' -o '%s/installed' && '%s/installed'",
               dest, dest, dest, dest, dest);
  cr_assert_eq(st, 0, "building or running against the installed ebb failed: %s%s", r->out, r->err);
  cr_assert_not_null(strstr(r->out, "owns=1"), "%s", r->out);
  run_cmd(r, "rm -rf '%s'", dest);
  free(r);
}
