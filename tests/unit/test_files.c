/* test_files.c: atomic writes and mkdir -p. */
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "dpy_core.h"

int main(void) {
    char dir[] = "/tmp/dpy_test_files_XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char err[512], path[1024], deep[512];
    snprintf(deep, sizeof deep, "%s/a/b/c", dir);
    CHECK(dpy_mkdir_p(deep, err, sizeof err) == 0);
    CHECK(dpy_mkdir_p(deep, err, sizeof err) == 0);   /* idempotent */
    struct stat st;
    CHECK(stat(deep, &st) == 0 && S_ISDIR(st.st_mode));

    snprintf(path, sizeof path, "%s/m.json", deep);
    CHECK(dpy_write_atomic(path, "first", 5, err, sizeof err) == 0);
    CHECK(dpy_write_atomic(path, "second!", 7, err, sizeof err) == 0);
    FILE *f = fopen(path, "rb");
    char buf[32] = {0};
    CHECK(f && fread(buf, 1, sizeof buf, f) == 7);
    if (f)
        fclose(f);
    CHECK(strcmp(buf, "second!") == 0);

    /* a file where a directory should be */
    snprintf(path, sizeof path, "%s/m.json/x", deep);
    CHECK(dpy_mkdir_p(path, err, sizeof err) == -1);
    /* writing into a missing directory fails with the path in the message */
    snprintf(path, sizeof path, "%s/nope/m.json", dir);
    CHECK(dpy_write_atomic(path, "x", 1, err, sizeof err) == -1);
    CHECK_CONTAINS(err, "nope");
    return check_report("files");
}
