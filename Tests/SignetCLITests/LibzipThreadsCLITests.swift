import Foundation
import Testing
import SignetTestSupport

/// libzip used from several threads at once: what CI once hit by chance, made certain.
@Suite("libzip from several threads: pack's deflate workers open their archives at once")
struct LibzipThreadsCLITests {
    /// A preload library that widens the race in libzip 1.7's `zip_open_from_source` (two
    /// function-level statics filled one after the other, without a lock, on the first call) from
    /// nanoseconds to 300 ms: the first thread to open an archive sleeps between filling the two;
    /// every other thread opens 100 ms later, in the middle of that sleep. Calls from Signet reach
    /// these through the PLT; libzip's own bitmap calls do too (it is not linked -Bsymbolic).
    static let widenRace = #"""
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <fcntl.h>
        #include <stdarg.h>
        #include <stdlib.h>
        #include <stdatomic.h>
        #include <unistd.h>
        #include <zip.h>

        static atomic_int openers;
        static _Thread_local int firstOpener, bitmapCalls;

        /* One line per event into $WIDEN_RACE_LOG, so the test knows the shim was in the way. */
        static void note(const char *line, size_t length) {
            const char *path = getenv("WIDEN_RACE_LOG");
            int fd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600) : -1;
            if (fd >= 0) { (void)!write(fd, line, length); close(fd); }
        }

        zip_t *zip_open_from_source(zip_source_t *src, int flags, zip_error_t *error) {
            zip_t *(*real)(zip_source_t *, int, zip_error_t *) =
                (zip_t *(*)(zip_source_t *, int, zip_error_t *))dlsym(RTLD_NEXT, "zip_open_from_source");
            if (atomic_fetch_add(&openers, 1) == 0) firstOpener = 1; else usleep(100000);
            note("open\n", 5);
            return real(src, flags, error);
        }

        zip_int64_t zip_source_make_command_bitmap(zip_source_cmd_t first, ...) {
            zip_int64_t bitmap = 0;
            int command = first;
            va_list ap;
            va_start(ap, first);
            while (command >= 0) {
                bitmap |= ZIP_SOURCE_MAKE_COMMAND_BITMASK(command);
                command = va_arg(ap, int);
            }
            va_end(ap);
            if (firstOpener && ++bitmapCalls == 2) { note("slept\n", 6); usleep(300000); }
            return bitmap;
        }
        """#

    @Test("two deflate workers opening their first archives at the same moment both write (libzip's lazily filled statics)")
    func deflateWorkersOpenAtOnce() throws {
        // Under AddressSanitizer its runtime must be the first library loaded, and a preload
        // shim would come before it: the race is proven by the plain run.
        guard !CLI.underAddressSanitizer else {
            print("skipped: a preload library and AddressSanitizer do not mix")
            return
        }
        guard ProcessInfo.processInfo.activeProcessorCount >= 2 else {
            print("skipped: pack deflates on one thread on a machine with one core")
            return
        }
        let work = try Workspace()
        let shim = work.directory.file("widen-race.c")
        try Data(Self.widenRace.utf8).write(to: URL(fileURLWithPath: shim))
        let library = work.directory.file("widen-race.so")
        let compiler = ["cc", "gcc", "clang"].first { (try? run("sh", ["-c", "command -v \($0)"]).status) == 0 } ?? "cc"
        let built = try run(compiler, ["-shared", "-fPIC", "-O1", "-o", library, shim, "-ldl"])
        try #require(built.status == 0, "the preload shim must build (scripts/install-deps.sh installs gcc): \(built.stderr)")

        // Two files deflate picks (text, over 4 KiB), so two workers each open an archive.
        let root = work.directory.file("dist")
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        for name in ["a.txt", "b.txt"] {
            try Data(String(repeating: "line of \(name) text\n", count: 2_000).utf8).write(to: URL(fileURLWithPath: root + "/" + name))
        }
        let package = work.directory.file("app.zip")
        let log = work.directory.file("widen-race.log")
        let environment: [String: String?] = ["LD_PRELOAD": library, "WIDEN_RACE_LOG": log]
        let packed = try CLI.run(
            [
                "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app",
                "--version", "1", "--out", package, "--json"
            ], environment: environment)
        #expect(packed.status == 0, "\(packed.stderr)")
        let files = try #require(try packed.json()["files"] as? [[String: Any]])
        #expect(files.map { $0["compression"] as? String } == ["deflated", "deflated"], "both files went through the workers: \(files)")
        // The shim was in the way (without it this test proves nothing): the first opener slept
        // between the two statics, and the two workers and the package itself opened archives.
        let events = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        #expect(events.contains("slept"), "\(events)")
        #expect(events.filter { $0 == "open" }.count >= 3, "\(events)")
        let checked = try run("unzip", ["-tq", package])
        #expect(checked.status == 0, "\(checked.stdoutText)")
    }
}
