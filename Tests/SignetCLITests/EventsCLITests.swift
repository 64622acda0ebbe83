import Foundation
import SignetTestSupport
import Testing

/// Events for agents and UIs (`--events-fd`, `--events`): JSON lines as the work happens, each
/// valid against docs/schema/events.schema.json, the last one the command's `--json` document.
@Suite("Events: JSON lines for agents and UIs, the last one the --json result", .serialized)
struct EventsCLITests {
    /// Runs signet with `arguments`, its descriptor 3 writing to a file (as an agent's pipe
    /// would); returns the run and the lines written there.
    static func withDescriptor3(_ arguments: [String], in directory: TemporaryDirectory) throws -> (ProcessResult, [Data]) {
        let events = directory.file("events-\(UUID().uuidString).jsonl")
        let result = try run("bash", ["-c", "exec \"$0\" \"$@\" 3>\"$EVENTS\"", CLI.binary] + arguments + ["--events-fd", "3"], environment: ["EVENTS": events])
        return (result, try lines(events))
    }

    static func lines(_ path: String) throws -> [Data] {
        try contents(path).split(separator: 0x0a).map { Data($0) }
    }

    static func object(_ line: Data) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: line) as? [String: Any], "\(String(decoding: line, as: UTF8.self))")
    }

    /// Checks `lines`: every one but the last against the events schema, the last against the
    /// command's (or the error) schema and equal to `json` (the `--json` document of the same run
    /// shape); returns the phases in order.
    static func check(_ lines: [Data], command: String, json: Data?) throws -> [String] {
        let last = try #require(lines.last, "\(command): no events")
        try JSONSchemaCLITests.check(lines.dropLast().map { ("events", $0) } + [(command, last)])
        if let json {
            #expect(
                try JSONSerialization.jsonObject(with: last) as? NSDictionary == JSONSerialization.jsonObject(with: json) as? NSDictionary,
                "the last line is the --json document")
        }
        var bytes: [String: Int] = [:]
        for line in lines.dropLast() {
            let event = try object(line)
            guard event["event"] as? String == "progress", let phase = event["phase"] as? String, let done = event["bytes_done"] as? Int else { continue }
            #expect(done >= bytes[phase, default: 0], "progress within a step never goes back: \(event)")
            bytes[phase] = done
        }
        return try lines.dropLast().map(object).filter { $0["event"] as? String == "phase" }.compactMap { $0["phase"] as? String }
    }

    @Test(
        "unpack URL over nginx (--events-fd 3) and update from a TUF repository (--events FILE): every step in order, progress, the last line equal to --json; pack and reverify too"
    )
    func steps() throws {
        let p = try UpdateCLITests.Publisher("events")
        try p.release(1)
        let work = p.work
        let scratch = try TemporaryDirectory()
        // update, with events in a file; then the same run's --json for the comparison.
        let events = scratch.file("update.jsonl")
        let updated = try CLI.run(
            [
                "update", "--repository", p.metadataURL, "--tuf-metadata", p.metadata, "--channel", "stable", "--dest", p.dest, "--tls-ca",
                p.server.root, "--state", p.state, "--events", events, "--json"
            ])
        #expect(updated.status == 0, "\(updated.stderr)")
        let updatePhases = try Self.check(try Self.lines(events), command: "update", json: updated.stdout)
        #expect(updatePhases.starts(with: ["refresh", "plan", "download", "verify", "stage", "swap"]), "\(updatePhases)")
        // The release, named once it is chosen: after plan, before the download.
        let kinds = try Self.lines(events).dropLast().map(Self.object).map { ($0["event"] as? String == "phase" ? $0["phase"] : $0["event"]) as? String ?? "" }
        let named = try #require(try Self.lines(events).dropLast().map(Self.object).first { $0["event"] as? String == "release" }, "\(kinds)")
        #expect(named["sequence"] as? Int == 1 && named["name"] as? String == "app", "\(named)")
        let manifest = try ConfirmedInstallCLITests.manifestSHA256(p.work.directory.file("app-1.zip"))
        #expect(named["manifest_sha256"] as? String == manifest)
        #expect(kinds.firstIndex(of: "release").map { $0 > kinds.firstIndex(of: "plan")! && $0 < kinds.firstIndex(of: "download")! } == true, "\(kinds)")

        // unpack URL of the package, into a fresh DIR, events on descriptor 3, text on stdout.
        let package = p.work.directory.file("app-1.zip")
        let served = p.server.www + "/events-app.zip"
        try FileManager.default.copyItem(atPath: package, toPath: served)
        let dest = scratch.file("app")
        let (unpacked, lines) = try Self.withDescriptor3(
            ["unpack", p.server.url("events-app.zip"), "--dest", dest, "--pubkey", work.publicDER, "--tls-ca", p.server.root], in: scratch)
        #expect(
            unpacked.status == 0 && unpacked.stdoutText.hasPrefix("installed"), "text on stdout as without events: \(unpacked.stdoutText) \(unpacked.stderr)")
        let unpackPhases = try Self.check(lines, command: "unpack", json: nil)
        #expect(unpackPhases == ["download", "verify", "stage", "swap"], "\(unpackPhases)")
        #expect((try Self.object(lines.last!))["destination"] as? String == dest)

        // pack and reverify, events in files.
        let packEvents = scratch.file("pack.jsonl")
        let out = scratch.file("again.zip")
        let tree = try TemporaryDirectory()
        _ = try tree.writeRandom("data.bin", count: 3 << 20)
        let packed = try CLI.run(
            [
                "pack", tree.path, "--key", work.privatePEM, "--passphrase-file", work.passFile, "--name", "app", "--version", "3", "--sequence", "3", "--out",
                out, "--events", packEvents, "--json"
            ])
        #expect(packed.status == 0, "\(packed.stderr)")
        #expect(try Self.check(try Self.lines(packEvents), command: "pack", json: packed.stdout) == ["pack"])
        let reverifyEvents = scratch.file("reverify.jsonl")
        let reverified = try CLI.run(["reverify", dest, "--pubkey", work.publicDER, "--events", reverifyEvents, "--json"])
        #expect(reverified.status == 0, "\(reverified.stderr)")
        #expect(try Self.check(try Self.lines(reverifyEvents), command: "reverify", json: reverified.stdout) == ["reverify"])
    }

    @Test("a refused install ends its events with the error document; a descriptor that is 0-2 or not open is exit 2")
    func failures() throws {
        let work = try Workspace()
        let scratch = try TemporaryDirectory()
        let package = work.directory.file("app.zip")
        try CLIHelpers.pack(work, ["a.txt": Data("one\n".utf8)], sequence: 1, out: package)
        let other = try Workspace()
        let events = scratch.file("refused.jsonl")
        let refused = try CLI.run(["unpack", package, "--dest", scratch.file("app"), "--pubkey", other.publicDER, "--events", events, "--json"])
        #expect(refused.status == 3, "\(refused.stderr)")
        let lines = try Self.lines(events)
        _ = try Self.check(lines, command: "error", json: refused.stdout)
        #expect(((try Self.object(lines.last!))["error"] as? [String: Any])?["code"] as? String == "untrusted-signer")
        for fd in ["2", "57"] {
            let bad = try CLI.run(["unpack", package, "--dest", scratch.file("never"), "--pubkey", work.publicDER, "--events-fd", fd])
            #expect(bad.status == 2 && bad.stderr.contains("--events-fd"), "\(fd): \(bad.stderr)")
        }
    }
}
