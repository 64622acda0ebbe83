import Foundation
import SignetTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// `signet serve`: io.signet.Update on a varlink socket, driven by a real client (PyPI
/// `varlink`: its `varlink.cli` and its Client, which parses the interface description the
/// service returns before every call).
@Suite("signet serve: the update service on varlink, with PyPI varlink as the client", .serialized)
struct ServiceCLITests {
    /// A `signet serve` of `config`, on a socket of group nogroup in a directory any user may
    /// traverse (the non-root client needs to reach it); stopped with SIGTERM when released.
    final class Service {
        let process: BackgroundProcess
        let directory: TemporaryDirectory
        var socket: String { directory.file("app.varlink") }
        var address: String { "unix:" + socket }
        var log: String { directory.file("serve.log") }

        init(config: String, extra: [String] = []) throws {
            directory = try TemporaryDirectory()
            chmod(directory.path, 0o755)
            process = try BackgroundProcess(
                CLI.binary, ["serve", "--varlink", "unix:" + directory.file("app.varlink"), "--config", config, "--group", "nogroup"] + extra,
                log: directory.file("serve.log"))
            let deadline = Date().addingTimeInterval(30)
            while !FileManager.default.fileExists(atPath: socket) {
                guard process.running, Date() < deadline else { throw SupportError("signet serve did not start: \(serveLog)") }
                usleep(5_000)
            }
        }

        var serveLog: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

        /// Stops the service as systemd would (SIGTERM) and waits for it.
        func stop() { process.stop() }

        deinit { stop() }
    }

    static let client = pythonScript("varlink_client.py")

    /// One call through the Python client: its replies and the call's time.
    static func call(_ service: Service, _ method: String, _ arguments: [String: Any] = [:], more: Bool = false) throws -> (
        replies: [[String: Any]], seconds: Double
    ) {
        let json = String(decoding: try JSONSerialization.data(withJSONObject: arguments), as: UTF8.self)
        let ran = try run("python3", ["-c", client, "call", service.address, method, json] + (more ? ["--more"] : []))
        return try parse(ran)
    }

    static func parse(_ ran: ProcessResult) throws -> (replies: [[String: Any]], seconds: Double) {
        guard ran.status == 0 else { throw SupportError("the varlink client failed (\(ran.status)): \(ran.stderr)") }
        return try parse(ran.stdoutText)
    }

    static func parse(_ text: String) throws -> (replies: [[String: Any]], seconds: Double) {
        var lines = try text.split(separator: "\n").map { try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
        let seconds = try #require(lines.popLast()?["seconds"] as? Double, "\(text)")
        return (lines, seconds)
    }

    /// The one reply of a call that succeeded.
    static func reply(_ service: Service, _ method: String, _ arguments: [String: Any] = [:]) throws -> [String: Any] {
        let (replies, _) = try call(service, method, arguments)
        guard replies.count == 1, replies[0]["error"] == nil else { throw SupportError("\(method): \(replies)\n\(service.serveLog)") }
        return replies[0]
    }

    /// `python3 -m varlink.cli call ADDRESS/io.signet.Update.METHOD ARGUMENTS`: its one reply.
    static func cli(_ service: Service, _ method: String, _ arguments: String = "{}") throws -> (reply: [String: Any]?, stderr: String) {
        let ran = try run("python3", ["-m", "varlink.cli", "call", "\(service.address)/io.signet.Update.\(method)", arguments])
        #expect(ran.status == 0, "\(ran.stderr)")
        return (try? JSONSerialization.jsonObject(with: ran.stdout) as? [String: Any], ran.stderr)
    }

    static func config(_ p: UpdateCLITests.Publisher, _ extra: String = "") throws -> String {
        try p.work.directory.write("app.conf", Data((p.configLines + extra).utf8), mode: 0o600)
    }

    @Test(
        "check → confirm → install → confirm over varlink (varlink.cli and the Client): Check names the manifest SHA-256 of the package, Install bound to it streams the events and installs it, a stale confirmation is Failed not-confirmed (exit 1) with DIR unchanged, Rollback, and GetInterfaceDescription equals docs/varlink"
    )
    func confirmedInstall() throws {
        let p = try UpdateCLITests.Publisher("serve-flow")
        try p.release(1)
        let service = try Service(config: try Self.config(p, "pending = true\n"))

        let info = try run("python3", ["-m", "varlink.cli", "info", service.address])
        #expect(info.status == 0 && info.stdoutText.contains("io.signet.Update"), "\(info.stdoutText)\(info.stderr)")
        let description = try run("python3", ["-m", "varlink.cli", "help", service.address + "/io.signet.Update"])
        let documented = try String(contentsOfFile: UpdateCLITests.repository + "/docs/varlink/io.signet.Update.varlink", encoding: .utf8)
        let served = description.stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(served == documented.trimmingCharacters(in: .whitespacesAndNewlines), "\(description.stderr)")

        let check = try #require(try Self.cli(service, "Check").reply, "\(service.serveLog)")
        let available = try #require(check["available"] as? [String: Any])
        let hash = try #require(available["manifestSha256"] as? String)
        #expect(check["updateAvailable"] as? Bool == true && available["sequence"] as? Int == 1)
        let packageHash = try ConfirmedInstallCLITests.manifestSHA256(p.work.directory.file("app-1.zip"))
        #expect(hash == packageHash, "the package's own manifest")

        let (replies, _) = try Self.call(service, "Install", ["requireManifestSha256": hash], more: true)
        let events = replies.dropLast().compactMap { $0["event"] as? [String: Any] }
        #expect(events.count == replies.count - 1, "every reply but the last is an event: \(replies)")
        let phases = events.filter { $0["event"] as? String == "phase" }.compactMap { $0["phase"] as? String }
        #expect(phases.contains("refresh") && phases.contains("swap"), "\(phases)")
        let named = events.first { $0["event"] as? String == "release" }
        #expect(named?["manifest_sha256"] as? String == hash, "the release named in the events: \(events)")
        let result = try #require(replies.last?["result"] as? [String: Any], "\(replies)")
        #expect(result["updated"] as? Bool == true && result["pending"] as? Bool == true, "\(result)")
        #expect(p.installedText() == "release 1\n")

        var status = try Self.reply(service, "Status")
        #expect((status["current"] as? [String: Any])?["sequence"] as? Int == 1 && status["pending"] as? Bool == true, "\(status)")
        #expect(status["running"] == nil || status["running"] is NSNull, "nothing running: \(status)")
        let confirmed = try #require(try Self.cli(service, "Confirm").reply)
        #expect((confirmed["confirmed"] as? [String: Any])?["sequence"] as? Int == 1, "\(confirmed)")
        status = try Self.reply(service, "Status")
        #expect(status["pending"] as? Bool == false, "\(status)")

        // A confirmation gone stale: release 2 was confirmed, 3 is what the channel names now.
        try p.release(2)
        let checkTwo = try Self.reply(service, "Check")
        let two = try #require((checkTwo["available"] as? [String: Any])?["manifestSha256"] as? String)
        try p.release(3)
        let stale = try Self.call(service, "Install", ["requireManifestSha256": two]).replies
        #expect(stale.first?["error"] as? String == "io.signet.Update.Failed", "\(stale)")
        let failure = stale.first?["parameters"] as? [String: Any]
        #expect(failure?["code"] as? String == "not-confirmed" && failure?["exit"] as? Int == 1, "\(stale)")
        #expect((failure?["message"] as? String)?.contains(two) == true, "names the confirmed digest: \(stale)")
        #expect(p.installedText() == "release 1\n", "DIR unchanged")
        let malformed = try Self.call(service, "Install", ["requireManifestSha256": "abc"]).replies
        #expect(malformed.first?["error"] as? String == "org.varlink.service.InvalidParameter", "\(malformed)")

        let three = try Self.reply(service, "Install")
        #expect((three["result"] as? [String: Any])?["updated"] as? Bool == true && p.installedText() == "release 3\n", "\(three)")
        let rolled = try Self.reply(service, "Rollback")
        #expect(rolled["rolledBack"] as? Bool == true && (rolled["to"] as? [String: Any])?["sequence"] as? Int == 1, "\(rolled)")
        #expect(p.installedText() == "release 1\n")
        status = try Self.reply(service, "Status")
        #expect((status["bad"] as? [[String: Any]])?.first?["sequence"] as? Int == 3, "\(status)")
        let cancel = try Self.reply(service, "Cancel")
        #expect(cancel["cancelled"] as? Bool == false, "nothing to cancel: \(cancel)")

        service.stop()
        #expect(!FileManager.default.fileExists(atPath: service.socket), "the socket it made is removed when it ends")
    }

    /// A publisher with release 1, its targets also served by a scripted server (HTTPS,
    /// nginx's chain): the config reads packages from there.
    static func scriptedTargets(_ name: String) throws -> (p: UpdateCLITests.Publisher, server: ScriptedServer, config: String) {
        let p = try UpdateCLITests.Publisher(name)
        try p.release(1)
        let server = try ScriptedServer(script: [:], tls: p.server.tls)
        try FileManager.default.createDirectory(atPath: server.file("targets"), withIntermediateDirectories: true)
        try copyTargets(p, server)
        return (p, server, try Self.config(p, "targets-url = \"\(server.url("targets/"))\"\nfull-download = true\n"))
    }

    static func copyTargets(_ p: UpdateCLITests.Publisher, _ server: ScriptedServer) throws {
        for name in try FileManager.default.contentsOfDirectory(atPath: p.repo + "/targets")
        where !FileManager.default.fileExists(atPath: server.file("targets/" + name)) {
            try FileManager.default.copyItem(atPath: p.repo + "/targets/" + name, toPath: server.file("targets/" + name))
        }
    }

    /// Publishes release 2 (over 100 KB), whose package pauses after 100 KB until the test
    /// lets it go on: an install in flight, without a throttle.
    static func publishPaused(_ p: UpdateCLITests.Publisher, _ server: ScriptedServer) throws {
        let filler = (0..<30_000).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 16) }.joined(separator: "\n")
        try p.release(2, files: ["a.txt": "release 2\n", "b/c.txt": "same in every release\n", "big.txt": filler])
        try copyTargets(p, server)
        try pause(server)
    }

    /// Every request for release 2's package pauses after 100 KB (a fresh script: its answers
    /// counted anew, the last release marker gone).
    static func pause(_ server: ScriptedServer) throws {
        try? FileManager.default.removeItem(atPath: server.directory.file("requests.log.release"))
        let names = try FileManager.default.contentsOfDirectory(atPath: server.file("targets")).filter { $0.contains("app-2") }
        #expect(!names.isEmpty, "release 2's package is in targets/")
        try server.replace(script: Dictionary(uniqueKeysWithValues: names.map { ("targets/" + $0, [ScriptedServer.Answer(pauses: [.init(after: 100_000)])]) }))
    }

    /// What lies beside DIR (the staging and download files an install makes go there).
    static func besideDestination(_ p: UpdateCLITests.Publisher) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: (p.dest as NSString).deletingLastPathComponent)) ?? []).sorted()
    }

    @Test(
        "two clients race: the second Install and Confirm are Busy, Status answers at once naming the running Install; Cancel mid-download returns within 1 s, the Install fails Cancelled, DIR and what lies beside it unchanged; a client that disconnects mid-install leaves it to finish"
    )
    func cancelAndRace() throws {
        let (p, server, config) = try Self.scriptedTargets("serve-cancel")
        let service = try Service(config: config)
        #expect(((try Self.reply(service, "Install"))["result"] as? [String: Any])?["updated"] as? Bool == true)
        #expect(p.installedText() == "release 1\n")
        try Self.publishPaused(p, server)
        let before = Self.besideDestination(p)

        // Client A installs release 2; its download pauses on the server.
        let outputA = service.directory.file("a.out")
        let a = try BackgroundProcess(try which("python3"), ["-c", Self.client, "call", service.address, "Install", "{}", "--more"], log: outputA)
        #expect(server.awaitPause(), "the download is in flight")

        // Client B, meanwhile.
        for method in ["Install", "Confirm", "Rollback", "Check"] {
            let busy = try Self.call(service, method).replies
            #expect(busy.first?["error"] as? String == "io.signet.Update.Busy", "\(method): \(busy)")
            #expect((busy.first?["parameters"] as? [String: Any])?["method"] as? String == "Install", "\(busy)")
        }
        let status = try Self.reply(service, "Status")
        let running = try #require(status["running"] as? [String: Any], "\(status)")
        #expect(running["method"] as? String == "Install" && running["phase"] as? String == "download", "\(running)")
        #expect((status["current"] as? [String: Any])?["sequence"] as? Int == 1)

        let (cancel, seconds) = try Self.call(service, "Cancel")
        #expect(cancel.first?["cancelled"] as? Bool == true && cancel.first?["method"] as? String == "Install", "\(cancel)")
        #expect(seconds < 1, "Cancel returned after \(seconds) s")
        #expect(a.wait() == 0)
        let repliesA = try Self.parse(String(decoding: try contents(outputA), as: UTF8.self)).replies
        #expect(repliesA.last?["error"] as? String == "io.signet.Update.Cancelled", "\(repliesA)")
        #expect(repliesA.dropLast().allSatisfy { $0["event"] != nil } && repliesA.count > 2, "events came before: \(repliesA)")
        #expect(p.installedText() == "release 1\n", "DIR unchanged")
        // Beside DIR: only the download kept for the next run to resume (FORMAT.md §6), no staging.
        let left = Set(Self.besideDestination(p)).subtracting(before)
        #expect(left.isSubset(of: [".app.signet-download"]), "\(left)")
        #expect(try CLI.run(["reverify", p.dest, "--pubkey", p.work.publicDER]).status == 0)

        // A client that goes away mid-install: the install runs to its end.
        try Self.pause(server)
        let dropped = try run("python3", ["-c", Self.client, "drop", service.address])
        #expect(dropped.status == 0 && dropped.stdoutText.contains("\"event\""), "\(dropped.stderr)")
        #expect(server.awaitPause())
        try server.release()
        let deadline = Date().addingTimeInterval(60)
        var last: [String: Any] = [:]
        repeat {
            last = try Self.reply(service, "Status")
            if last["running"] == nil || last["running"] is NSNull { break }
            usleep(20_000)
        } while Date() < deadline
        #expect((last["current"] as? [String: Any])?["sequence"] as? Int == 2, "the install finished: \(last)\n\(service.serveLog)")
        #expect(p.installedText() == "release 2\n")
        #expect(try CLI.run(["reverify", p.dest, "--pubkey", p.work.publicDER]).status == 0)
        #expect(!Self.besideDestination(p).contains(".app.signet-download"), "the finished install left no download behind")
    }

    @Test(
        "who may call what: a user of the socket's group (nobody, nogroup; setpriv) gets Status in < 50 ms but PermissionDenied for Install, Confirm, Rollback, Cancel and Check; a user outside the group cannot open the socket"
    )
    func nonRootStatus() throws {
        guard getuid() == 0 else {
            print("skipped: needs root to act as nobody with setpriv")
            return
        }
        let p = try UpdateCLITests.Publisher("serve-status")
        try p.release(1)
        let service = try Service(config: try Self.config(p))
        #expect(((try Self.reply(service, "Install"))["result"] as? [String: Any])?["updated"] as? Bool == true)
        // The varlink library where nobody may read it (root's Python may live under /root).
        let library = try run("python3", ["-c", "import os, varlink; print(os.path.dirname(varlink.__file__))"]).stdoutText
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let copy = try TemporaryDirectory()
        chmod(copy.path, 0o755)
        try FileManager.default.copyItem(atPath: library, toPath: copy.file("varlink"))
        _ = try run("chmod", ["-R", "a+rX", copy.path])
        func asUser(_ uid: Int, _ gid: Int, _ arguments: [String]) throws -> ProcessResult {
            try run(
                "setpriv", ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "/usr/bin/python3", "-c", Self.client] + arguments,
                environment: ["PYTHONPATH": copy.path, "HOME": "/"])
        }
        let times = try asUser(65534, 65534, ["status-times", service.address, "20"])
        #expect(times.status == 0, "\(times.stderr)")
        let measured = try #require(try JSONSerialization.jsonObject(with: times.stdout) as? [String: Any])
        let seconds = ((measured["seconds"] as? [Double]) ?? []).sorted()
        #expect(seconds.count == 20 && seconds[10] < 0.05, "Status's median \(seconds.count > 10 ? seconds[10] : -1) s")
        #expect(((measured["last"] as? [String: Any])?["current"] as? [String: Any])?["sequence"] as? Int == 1, "\(measured)")
        for method in ["Install", "Confirm", "Rollback", "Cancel", "Check"] {
            let denied = try Self.parse(try asUser(65534, 65534, ["call", service.address, method])).replies
            #expect(denied.first?["error"] as? String == "org.varlink.service.PermissionDenied", "\(method): \(denied)")
        }
        let outsider = try asUser(4321, 4321, ["status-times", service.address, "1"])
        #expect(outsider.status != 0 && outsider.stderr.contains("Permission denied"), "\(outsider.stderr)")
        #expect(p.installedText() == "release 1\n")
    }

    @Test(
        "socket activation (systemd-socket-activate, as systemd passes a socket): the service answers on the socket it was given; a socket bound elsewhere than --varlink names is refused (exit 2); a live socket is not taken over, a stale one is"
    )
    func socketActivation() throws {
        let p = try UpdateCLITests.Publisher("serve-activation")
        try p.release(1)
        let config = try Self.config(p)
        let directory = try TemporaryDirectory()
        let socket = directory.file("activated.varlink")
        let activator = try BackgroundProcess(
            try which("systemd-socket-activate"), ["-l", socket, CLI.binary, "serve", "--varlink", "unix:" + socket, "--config", config],
            log: directory.file("activator.log"))
        defer { activator.stop() }
        let deadline = Date().addingTimeInterval(30)
        while !FileManager.default.fileExists(atPath: socket) && Date() < deadline { usleep(5_000) }
        let status = try Self.parse(try run("python3", ["-c", Self.client, "call", "unix:" + socket, "Status"], timeout: 20)).replies

        #expect(status.first?["destination"] as? String == p.dest, "\(status)")

        // Bound elsewhere: the unit and the command disagree.
        let other = directory.file("other.varlink")
        // What systemd does, in a few lines of Python: a socket bound at `other`, passed as
        // descriptor 3 with LISTEN_PID and LISTEN_FDS, then exec.
        let activate = """
            import os, socket, sys
            s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
            if s.fileno() != 3: os.dup2(s.fileno(), 3)
            os.set_inheritable(3, True)
            os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
            os.execv(sys.argv[2], sys.argv[2:])
            """
        let mismatch = try run(
            "python3", ["-c", activate, other, CLI.binary, "serve", "--varlink", "unix:" + directory.file("named.varlink"), "--config", config], timeout: 60)
        let said = mismatch.stderr
        #expect(mismatch.status == 2 && said.contains("must name the same path"), "\(said)")

        // By hand: a live service's socket is refused; a stale one (a file nobody listens on) replaced.
        let service = try Service(config: config)
        let second = try CLI.run(["serve", "--varlink", service.address, "--config", config])
        #expect(second.status == 5 && second.stderr.contains("already answers"), "\(second.stderr)")
        service.stop()
        let stale = service.socket
        let made = try run("python3", ["-c", "import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])", stale])
        #expect(made.status == 0 && FileManager.default.fileExists(atPath: stale))
        let again = try Service(config: config)
        #expect(((try Self.reply(again, "Status"))["destination"] as? String) == p.dest)
        let file = again.directory.file("plain")
        _ = FileManager.default.createFile(atPath: file, contents: Data("x".utf8))
        let notSocket = try CLI.run(["serve", "--varlink", "unix:" + file, "--config", config])
        #expect(notSocket.status == 5 && notSocket.stderr.contains("not a socket"), "\(notSocket.stderr)")
        let abstract = try CLI.run(["serve", "--varlink", "unix:@signet", "--config", config])
        #expect(abstract.status == 2 && abstract.stderr.contains("abstract"), "\(abstract.stderr)")
    }

    @Test("README's varlink block, run as written against a service on its socket: Check, Install bound to the digest, Status")
    func readme() throws {
        let p = try UpdateCLITests.Publisher("serve-readme")
        try p.release(1)
        let service = try Service(config: try Self.config(p))
        let block = try UpdateCLITests.readmeBlock("agent-varlink").replacingOccurrences(of: "/run/signet/app.varlink", with: service.socket)
        let scratch = try TemporaryDirectory()
        let ran = try ReadmeBlocksTests.runBlock(block, in: scratch.path, environment: ReadmeBlocksTests.environment())
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        #expect(p.installedText() == "release 1\n")
        let status = try #require(try JSONSerialization.jsonObject(with: ran.stdout) as? [String: Any], "\(ran.stdoutText)")
        #expect((status["current"] as? [String: Any])?["sequence"] as? Int == 1, "\(status)")
        let install = String(decoding: try contents(scratch.file("install.json")), as: UTF8.self)
        #expect(install.contains("\"phase\": \"swap\"") && install.contains("\"result\""), "\(install)")
    }

    @Test(
        "hostile clients (a message over 64 KiB without its NUL, not JSON, not an object, no method, wrong types, 30,000 nested arrays, invalid UTF-8, unknown methods and interfaces, malformed digests, pipelined calls): each ends its connection or is answered with a varlink error; the service stays up and answers Status"
    )
    func hostile() throws {
        let p = try UpdateCLITests.Publisher("serve-hostile")
        try p.release(1)
        let service = try Service(config: try Self.config(p))
        let ran = try run("python3", ["-c", pythonScript("varlink_hostile.py"), service.socket], timeout: 120)
        #expect(ran.status == 0, "\(ran.stderr)")
        var cases: [String: (kind: String, reply: Any?)] = [:]
        for line in ran.stdoutText.split(separator: "\n") {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            cases[object["case"] as? String ?? ""] = (object["kind"] as? String ?? "", object["reply"])
        }
        for name in [
            "no-nul-over-limit", "not-json", "json-array", "no-method", "method-number", "parameters-array", "more-number", "deep-nesting", "nul-first"
        ] {
            #expect(cases[name]?.kind == "closed", "\(name): the connection ends, nothing answered: \(String(describing: cases[name]))")
        }
        func error(_ name: String) -> String? { (cases[name]?.reply as? [String: Any])?["error"] as? String }
        #expect(error("unknown-method") == "org.varlink.service.MethodNotFound")
        #expect(error("unknown-interface") == "org.varlink.service.InterfaceNotFound")
        #expect(error("no-interface") == "org.varlink.service.InterfaceNotFound")
        #expect(error("invalid-utf8") == nil || cases["invalid-utf8"]?.kind == "closed", "\(String(describing: cases["invalid-utf8"]))")
        #expect(error("description-of-unknown") == "org.varlink.service.InterfaceNotFound")
        #expect(error("description-without-parameter") == "org.varlink.service.InvalidParameter")
        for name in ["hash-not-hex", "hash-number", "hash-uppercase-long", "hash-fullwidth"] {
            #expect(error(name) == "org.varlink.service.InvalidParameter", "\(name): \(String(describing: cases[name]))")
        }
        #expect(cases["oneway-status"]?.kind == "silent", "a oneway call gets no reply")
        #expect(cases["huge-number"] != nil)
        #expect(
            (cases["pipelined"]?.reply as? [[String]]) == [
                ["interfaces", "product", "url", "vendor", "version"],
                ["bad", "current", "destination", "heldBack", "pending", "previous", "report", "running"],
                ["interfaces", "product", "url", "vendor", "version"]
            ], "\(String(describing: cases["pipelined"]))")
        #expect(cases["after"]?.kind == "reply", "the service still answers")
        #expect(service.process.running, "and runs: \(service.serveLog)")
        #expect(p.installedText() == nil, "nothing was installed by any of it")
    }
}
