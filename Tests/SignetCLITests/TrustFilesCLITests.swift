import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Issue 36, points 3 and 7: files that convey trust, and the systemd unit's sandbox.
@Suite("Files that convey trust: other users' files, the unit's bounds and filter", .serialized)
struct TrustFilesCLITests {
    // MARK: Point 3: files that convey trust must be trustworthy

    @Test(
        "every option that conveys trust refuses a file owned by nobody, a file of mode 0666, and one reached through a folder others can write: exit 5 insecure-file, naming the file and the fix, nothing done",
        arguments: ["owner", "mode", "folder"])
    func untrustworthyTrustFiles(_ flaw: String) throws {
        let work = try Workspace()
        let package = work.directory.file("app.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("a\n".utf8)], out: package)
        // Everything a device reads to decide whom to trust, made the way a careful admin would.
        let d = work.directory
        try FileManager.default.createDirectory(atPath: d.file("trust/stable"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.publicDER, toPath: d.file("trust/stable/release.der"))
        try FileManager.default.createDirectory(atPath: d.file("roots"), withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: work.certificate, toPath: d.file("roots/root.der"))
        try d.write("salt", Data(repeating: 7, count: 32), mode: 0o600)
        try #require(try CLI.run(["unpack", package, "--dest", d.file("other"), "--pubkey", work.publicDER, "--state", d.file("state.json")]).status == 0)
        // A device's trusted TUF metadata, made from a one-key repository's first root.
        for step in [
            ["repo", "init", d.file("repo"), "--key", work.privatePEM, "--passphrase-file", work.passFile],
            ["tuf", "init", "--metadata-dir", d.file("tuf"), d.file("repo/metadata/1.root.json")]
        ] {
            try #require(try CLI.run(step).status == 0, "\(step.prefix(2))")
        }
        try d.write(
            "update.conf",
            Data(
                "repository = \"https://localhost:9/metadata/\"\ntuf-metadata = \"\(d.file("tuf"))\"\nchannel = \"stable\"\ndest = \"\(d.file("dest"))\"\n".utf8
            ))
        let url = "https://localhost:9/app.zip"
        let dest = d.file("dest")
        // (what is made untrustworthy, the command)
        let cases: [(String, [String])] = [
            (work.publicDER, ["unpack", package, "--dest", dest, "--pubkey", work.publicDER]),
            (d.file("trust"), ["unpack", package, "--dest", dest, "--trust-dir", d.file("trust")]),
            (d.file("trust/stable/release.der"), ["unpack", package, "--dest", dest, "--trust-dir", d.file("trust")]),
            (work.certificate, ["unpack", package, "--dest", dest, "--ca", work.certificate]),
            (d.file("salt"), ["unpack", package, "--dest", dest, "--trust-dir", d.file("trust"), "--trust-salt-file", d.file("salt")]),
            (d.file("state.json"), ["unpack", package, "--dest", dest, "--pubkey", work.publicDER, "--state", d.file("state.json")]),
            (d.file("roots/root.der"), ["unpack", url, "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", d.file("roots/root.der")]),
            (d.file("roots"), ["unpack", url, "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", d.file("roots")]),
            (work.certificate, ["fetch", url, "--out", d.file("out"), "--tls-cert", work.certificate]),
            (d.file("update.conf"), ["update", "--config", d.file("update.conf")]),
            (d.file("tuf"), ["update", "--config", d.file("update.conf")]),
            (d.file("tuf/root.json"), ["update", "--config", d.file("update.conf")])
        ]
        for (target, arguments) in cases {
            // Each case starts from trustworthy files: the command works up to the network.
            var moved: String? = nil
            switch flaw {
            case "owner": #expect(chown(target, 65534, 65534) == 0)
            case "mode": #expect(chmod(target, 0o666) == 0 || true); if FileManager.default.fileExists(atPath: target + "/.") { chmod(target, 0o777) }
            default:
                // The same file, reached through a folder everyone may write (no sticky bit).
                let open = d.file("open-\((target as NSString).lastPathComponent)")
                try FileManager.default.createDirectory(atPath: open, withIntermediateDirectories: true)
                chmod(open, 0o777)
                moved = open + "/" + (target as NSString).lastPathComponent
                try FileManager.default.moveItem(atPath: target, toPath: moved!)
                try FileManager.default.createSymbolicLink(atPath: target, withDestinationPath: moved!)
            }
            let result = try CLI.run(arguments + ["--json"])
            let shown = "\(flaw) of \((target as NSString).lastPathComponent) for \(arguments[0]) \(arguments.dropFirst().first ?? "")"
            #expect(result.status == 5 && CLIHelpers.errorCode(result) == "insecure-file", "\(shown): \(result.status) \(result.stdoutText) \(result.stderr)")
            let fix = flaw == "owner" ? "chown" : "chmod"
            #expect(
                result.stderr.contains(fix) && result.stderr.contains(flaw == "folder" ? "open-" : (target as NSString).lastPathComponent),
                "\(shown): names the file and the fix: \(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: dest) && !FileManager.default.fileExists(atPath: d.file("out")), "\(shown): nothing done")
            // Back to trustworthy.
            if let moved {
                try FileManager.default.removeItem(atPath: target)
                try FileManager.default.moveItem(atPath: moved, toPath: target)
            } else if flaw == "owner" {
                #expect(chown(target, 0, 0) == 0)
            } else {
                chmod(target, FileManager.default.fileExists(atPath: target + "/.") ? 0o755 : 0o644)
            }
        }
        // And with everything trustworthy, the local install works.
        let fine = try CLI.run(["unpack", package, "--dest", dest, "--trust-dir", d.file("trust"), "--state", d.file("state.json")])
        #expect(fine.status == 0, "\(fine.stderr)")
    }

    // MARK: Point 7: the unit, and openat2 answered with EPERM

    /// A seccomp filter (raw BPF: no library) that answers openat2 with EPERM, as an older
    /// systemd's `SystemCallFilter=@system-service` may, then runs argv[1...]. It checks first
    /// that openat2 is denied, and says so on stderr.
    static let denyOpenat2 = """
        #include <errno.h>
        #include <linux/audit.h>
        #include <linux/filter.h>
        #include <linux/seccomp.h>
        #include <stddef.h>
        #include <stdio.h>
        #include <sys/prctl.h>
        #include <sys/syscall.h>
        #include <unistd.h>
        int main(int argc, char **argv) {
            struct sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            };
            struct sock_fprog program = { sizeof filter / sizeof filter[0], filter };
            if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program)) { perror("seccomp"); return 125; }
            long r = syscall(SYS_openat2, -100, "/", 0, 0);
            if (!(r < 0 && errno == EPERM)) { fprintf(stderr, "openat2 not denied\\n"); return 125; }
            fprintf(stderr, "openat2 denied with EPERM\\n");
            execv(argv[1], argv + 1);
            perror("execv");
            return 126;
        }
        """

    @Test(
        "under a seccomp filter that answers openat2 with EPERM, a ranged update still reuses the unchanged files (the fallback walks one component at a time)")
    func openat2DeniedWithEPERM() throws {
        let server = try DamagedTransfersCLITests.shared.get()
        let work = try Workspace()
        let harness = work.directory.file("deny-openat2")
        try work.directory.write("deny-openat2.c", Data(Self.denyOpenat2.utf8))
        let built = try run("gcc", ["-O1", "-o", harness, harness + ".c"])
        try #require(built.status == 0, "\(built.stderr)")
        var same: [String: Data] = [:]
        for index in 0..<20 { same["d/f\(index).bin"] = CLIHelpers.randomData(20_000) }
        try CLIHelpers.pack(work, same.merging(["changed.bin": CLIHelpers.randomData(1000)]) { $1 }, sequence: 1, out: work.directory.file("v1.zip"))
        try CLIHelpers.pack(work, same.merging(["changed.bin": CLIHelpers.randomData(1000)]) { $1 }, sequence: 2, out: server.www + "/seccomp.zip")
        let dest = work.directory.file("app")
        try #require(try CLI.run(["unpack", work.directory.file("v1.zip"), "--dest", dest, "--pubkey", work.publicDER]).status == 0)
        let result = try run(
            harness, [CLI.binary, "unpack", server.url("seccomp.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", server.root, "--json"])
        #expect(result.stderr.contains("openat2 denied with EPERM"), "the filter is in force: \(result.stderr)")
        #expect(result.status == 0, "\(result.stderr)")
        let transfer = try #require(try result.json()["transfer"] as? [String: Any], "\(result.stdoutText)")
        #expect(transfer["files_reused"] as? Int == 20 && transfer["files_fetched"] as? Int == 1, "\(transfer)")
        #expect(try contents(dest + "/d/f3.bin") == same["d/f3.bin"])
    }

    @Test("the shipped unit bounds a run with TimeoutStartSec, below which --max-time is documented")
    func unitTimeout() throws {
        let unit = try String(contentsOfFile: UpdateCLITests.repository + "/packaging/systemd/signet-update@.service", encoding: .utf8)
        let line = try #require(unit.split(separator: "\n").first { $0.hasPrefix("TimeoutStartSec=") }, "TimeoutStartSec= is set")
        #expect(line == "TimeoutStartSec=1h")
        let help = try CLI.run(["update", "--help"])
        #expect(help.stdoutText.contains("TimeoutStartSec"), "--max-time's help names it")
    }
}
