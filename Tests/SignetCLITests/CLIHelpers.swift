import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Helpers the command-line suites share: packages of given files, random data, a command run as
/// another user, the code of a JSON error, large files, a bare package made by openssl and zip.
enum CLIHelpers {
    /// One nginx for the suite (issue 50: no server started per test); each test serves its own paths.
    nonisolated(unsafe) static let shared = Result { try HTTPSServer.site("cli-helpers") }

    /// Packs `files` (name → bytes) as package `name` `sequence` into `out`.
    static func pack(_ work: Workspace, _ files: [String: Data], name: String = "app", sequence: Int = 1, out: String, extra: [String] = []) throws {
        let tree = try TemporaryDirectory()
        for (path, data) in files {
            let full = tree.file(path)
            try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try data.write(to: URL(fileURLWithPath: full))
        }
        let packed = try CLI.run(
            [
                "pack", tree.path, "--key", work.privatePEM, "--passphrase-file", work.passFile,
                "--name", name, "--version", "\(sequence)", "--sequence", "\(sequence)", "--out", out
            ] + extra)
        guard packed.status == 0 else { throw SupportError("pack failed: \(packed.stderr)") }
    }

    static func randomData(_ count: Int) -> Data { Data(try! randomBytes(count)) }

    // MARK: Point 10: planted partial downloads and lock files

    /// Runs `arguments` as uid/gid `uid` (setpriv); nil when not root.
    static func asUser(_ uid: Int, _ executable: String, _ arguments: [String]) throws -> ProcessResult? {
        guard geteuid() == 0 else { return nil }
        return try run("setpriv", ["--reuid=\(uid)", "--regid=\(uid)", "--clear-groups", executable] + arguments)
    }

    // MARK: Points 1, 9, 13: another product, a relabelled tree, reverify's expected package

    static func errorCode(_ result: ProcessResult) -> String? {
        (try? result.json()["error"] as? [String: Any])?["code"] as? String
    }

    static let examplePublicKey = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("keys-example/public_key.der").path

    /// A 128 MiB file that costs nothing to make (sparse): what a hostile server sends.
    static func bigFile(_ path: String, size: off_t = 128 << 20) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0, ftruncate(fd, size) == 0 else { throw SupportError("cannot make \(path): \(errno)") }
        close(fd)
    }

    /// Runs signet with `arguments`, waits for the hook to write its pid into `marker`, sends
    /// `signal` to signet, and reports signet's exit and whether the hook's process group is
    /// still there 3 s later (its pid, to end it).
    static let interrupter = pythonScript("hook_interrupter.py")

    /// A package of two files, signed with the workspace's key.
    static func package(_ work: Workspace, sequence: String = "7") throws -> String {
        let root = try PackCLITests.tree(work)
        let package = work.directory.file("app-\(sequence).zip")
        let packed = try CLI.run([
            "pack", root, "--key", work.privatePEM, "--passphrase-file", work.passFile,
            "--name", "app", "--version", "1", "--sequence", sequence, "--out", package
        ])
        guard packed.status == 0 else { throw SupportError("pack: \(packed.stderr)") }
        return package
    }

    /// A writable cgroup v2 hierarchy: the one mounted, or one mounted for the test.
    static func cgroup2Root(_ work: Workspace) throws -> (path: String, mountedHere: Bool) {
        let mounts = try String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)
        if let line = mounts.split(separator: "\n").first(where: { $0.split(separator: " ").count > 2 && $0.split(separator: " ")[2] == "cgroup2" }) {
            return (String(line.split(separator: " ")[1]), false)
        }
        let mountPoint = work.directory.file("cgroup2")
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        let mounted = try SignetTestSupport.run("mount", ["-t", "cgroup2", "none", mountPoint])
        guard mounted.status == 0 else { throw SupportError("no cgroup v2 hierarchy, and mounting one failed: \(mounted.stderr)") }
        return (mountPoint, true)
    }

    /// A bare package made by openssl dgst and Info-ZIP zip: a.txt and sub/b.txt with .sig
    /// files beside them (and, with `unsigned`, c.txt without one).
    static func barePackage(_ work: Workspace, unsigned: Bool = false, name: String = "bare.zip", text: String = "alpha\n") throws -> String {
        let root = work.directory.file("bare-" + name)
        try FileManager.default.createDirectory(atPath: root + "/sub", withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: root + "/a.txt"))
        try Data("beta\n".utf8).write(to: URL(fileURLWithPath: root + "/sub/b.txt"))
        for file in ["a.txt", "sub/b.txt"] {
            try work.openssl([
                "dgst", "-sha256", "-sign", work.privatePEM, "-passin", "file:" + work.passFile, "-out", root + "/" + file + ".sig", root + "/" + file
            ])
        }
        var entries = ["a.txt", "a.txt.sig", "sub/b.txt", "sub/b.txt.sig"]
        if unsigned {
            try Data("gamma\n".utf8).write(to: URL(fileURLWithPath: root + "/c.txt"))
            entries.append("c.txt")
        }
        let package = work.directory.file(name)
        let zipped = try SignetTestSupport.run("zip", ["-q", package] + entries, directory: root)
        guard zipped.status == 0 else { throw SupportError(zipped.stderr) }
        return package
    }

}
