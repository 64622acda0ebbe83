import Foundation
import Testing
import SignetTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// A hook runs with descriptors 0, 1 and 2 only; a run killed in its post-install hook ends
/// the hook's process group and leaves the release unchecked, so the next run checks it.
@Suite("Hooks: what a hook gets, and a run killed inside one")
struct HooksCLITests {
    /// Point 7: a hook got a connected AF_UNIX socket pair without close-on-exec. The hook
    /// lists its shell's descriptors; the update went over HTTPS first (libcurl and OpenSSL
    /// loaded, a connection made), DIR's lock is held.
    @Test("hooks get descriptors 0, 1 and 2 only, after an install over HTTPS")
    func hookDescriptors() throws {
        let server = try RangedUpdateCLITests.shared.get()
        let f = try ReleasesCLITests.Fixture()
        let name = "fds-\(getpid()).zip"
        try FileManager.default.copyItem(atPath: try f.pack(1), toPath: server.www + "/" + name)
        let listing = f.work.directory.file("fds.txt")
        // Every descriptor open in the hook's process (a shell would add its own).
        let script = try f.work.directory.write(
            "fds.py",
            Data(
                """
                import os, sys
                fds = []
                for fd in range(0, 4096):
                    try:
                        os.fstat(fd)
                        fds.append(str(fd))
                    except OSError:
                        pass
                open(sys.argv[1], "w").write("\\n".join(fds))
                """.utf8))
        let hook = "python3 \(script) \(listing)"
        let result = try CLI.run([
            "unpack", server.url(name), "--dest", f.dest, "--pubkey", f.work.publicDER, "--tls-ca", server.root,
            "--post-install", hook, "--health-check", hook
        ])
        #expect(result.status == 0, "\(result.stderr)")
        let fds = try String(contentsOfFile: listing, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(fds == ["0", "1", "2"], "\(fds)")
    }

    /// Point 8: an update killed during --post-install left a release that was never
    /// health-checked marked confirmed, and the next run said "up to date".
    @Test("a run killed in its post-install hook leaves the release unchecked: SIGTERM ends the hook's group; after SIGKILL the next run runs the health check")
    func interruptedHooks() throws {
        let f = try ReleasesCLITests.Fixture()
        #expect(try f.unpack(try f.pack(1), ["--health-check", "true"]).status == 0)
        func interrupt(_ package: String, _ number: Int32) throws -> [String: Any] {
            let marker = f.work.directory.file("hook-\(number).pid")
            let arguments = [
                "unpack", package, "--dest", f.dest, "--pubkey", f.work.publicDER, "--state", f.state,
                "--post-install", "sh -c 'echo $$ > \(marker); exec sleep 30'", "--health-check", "true"
            ]
            let result = try run("python3", ["-c", CLIHelpers.interrupter, marker, String(number), CLI.binary] + arguments)
            return try result.json()
        }
        func status() throws -> (json: [String: Any], text: String) {
            (try CLI.run(["status", f.dest, "--json"]).json(), try CLI.run(["status", f.dest]).stdoutText)
        }

        // SIGKILL in the post-install hook: the hook dies with signet (its parent-death signal),
        // the release is unchecked, never confirmed; the next run, given the same hooks, runs the
        // post-install command again (it never finished) and then the health check.
        try f.write("config.txt", "release 2\n")
        let two = try f.pack(2)
        let killed = try interrupt(two, SIGKILL)
        if let group = killed["group"] as? Int32, group > 0 { kill(-group, SIGKILL) }
        #expect(killed["status"] as? Int == -Int(SIGKILL), "\(killed)")
        var (json, text) = try status()
        #expect(json["unchecked"] as? Bool == true && !text.contains("confirmed") && text.contains("unchecked"), "\(json) \(text)")
        #expect(json["post_install_unfinished"] is String && text.contains("post-install not finished"), "\(json) \(text)")
        let next = try f.unpack(two, ["--post-install", "true", "--health-check", "sh -c 'echo checked'", "--json"])
        #expect(next.status == 0, "\(next.stderr)")
        let hooks = try next.json()["hooks"] as? [[String: Any]] ?? []
        #expect(hooks.map { $0["hook"] as? String } == ["post-install", "health-check"] && hooks.last?["output"] as? String == "checked\n", "\(hooks)")
        (json, text) = try status()
        #expect(json["unchecked"] as? Bool == false && text.contains("confirmed"), "\(text)")

        // SIGTERM: signet ends the hook's process group before it dies; the next run's failing
        // check swaps the previous release back.
        try f.write("config.txt", "release 3\n")
        let three = try f.pack(3)
        let terminated = try interrupt(three, SIGTERM)
        #expect(terminated["alive"] as? Bool == false, "the hook's group outlived signet: \(terminated)")
        if let group = terminated["group"] as? Int32, group > 0 { kill(-group, SIGKILL) }
        #expect(try status().json["unchecked"] as? Bool == true)
        let failing = try f.unpack(three, ["--health-check", "sh -c 'exit 3'", "--json"])
        #expect(failing.status == 1 && (try? failing.json()["error"] as? [String: Any])?["code"] as? String == "health-check-failed", "\(failing.stdoutText)")
        #expect(f.text("config.txt") == "release 2\n")
        (json, text) = try status()
        #expect(json["unchecked"] as? Bool == false, "\(json)")
        #expect(text.contains("confirmed") && text.contains("bad:      app sequence 3 —"), "\(text)")
    }

}
