import Foundation
import Testing
import SignetTestSupport

/// Issue 53: rollouts from a static host (nginx), signed in the targets metadata. The clock is
/// injected through the signed plan's start (a start 25 hours ago puts the fleet at the plan's
/// 24-hour step now): nothing waits on real time.
@Suite("Rollouts: signed waves, pause, halt, emergency, holds", .serialized)
struct RolloutCLITests {
    typealias Publisher = UpdateCLITests.Publisher

    /// A device: its id file, its own trusted metadata and DIR.
    struct Device {
        let id: String
        let idFile: String
        let metadata: String
        let dest: String
        let state: String

        init(_ p: Publisher, _ index: Int) throws {
            id = String(format: "%08x%024x", index, index &* 2_654_435_761)
            let folder = p.work.directory.file("device-\(index)")
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            idFile = folder + "/machine-id"
            try Data((id + "\n").utf8).write(to: URL(fileURLWithPath: idFile))
            metadata = folder + "/tuf"
            dest = folder + "/app"
            state = folder + "/state.json"
            try p.check(CLI.run(["tuf", "init", "--metadata-dir", metadata, p.repo + "/metadata/1.root.json"]))
        }

        func update(_ p: Publisher, _ extra: [String] = []) throws -> ProcessResult {
            try CLI.run(["update", "--repository", p.metadataURL, "--tuf-metadata", metadata, "--channel", "stable", "--dest", dest,
                         "--tls-ca", p.server.root, "--state", state, "--device-id-file", idFile, "--json"] + extra)
        }

        var installed: String? { try? String(contentsOfFile: dest + "/a.txt", encoding: .utf8) }
    }

    /// The bucket FORMAT.md §7 defines, computed apart (Python's hashlib).
    static func buckets(_ ids: [String], name: String, sequence: Int) throws -> [Int] {
        let script = """
        import hashlib, sys
        for line in sys.stdin.read().split():
            print(int.from_bytes(hashlib.sha256(line.encode() + b"\\x00\(name)\\x00\(sequence)").digest()[:8], "big") % 10000)
        """
        let result = try SignetTestSupport.run("python3", ["-c", script], input: Data(ids.joined(separator: "\n").utf8))
        return result.stdoutText.split(separator: "\n").compactMap { Int($0) }
    }

    /// Packs release `sequence` and lists it on stable with `extra` (a rollout plan), signed and refreshed.
    static func publish(_ p: Publisher, _ sequence: Int, _ extra: [String] = []) throws {
        let tree = try TemporaryDirectory()
        try Data("release \(sequence)\n".utf8).write(to: URL(fileURLWithPath: tree.file("a.txt")))
        let package = p.work.directory.file("app-\(sequence).zip")
        try p.check(CLI.run(["pack", tree.path, "--name", "app", "--version", "1.\(sequence)", "--sequence", "\(sequence)", "--out", package] + p.key))
        try p.check(CLI.run(["repo", "add", p.repo, package, "--channel", "stable"] + extra + p.key))
        try refresh(p)
    }

    static func refresh(_ p: Publisher) throws {
        try p.check(CLI.run(["repo", "refresh", p.repo, "--snapshot-key", p.work.privatePEM, "--timestamp-key", p.work.privatePEM,
                             "--passphrase-file", p.work.passFile]))
    }

    static func rollout(_ result: ProcessResult) throws -> [String: Any] {
        try #require(try result.json()["rollout"] as? [String: Any], "\(result.stdoutText)")
    }

    @Test("A plan signed with the release: each device installs once its bucket is open, says when otherwise; pause holds the share, a stale mirror's older plan is refused, halt stops new installs, an emergency plan opens all; --ignore-rollout installs now")
    func waves() throws {
        let p = try Publisher("rollout-waves")
        try Self.publish(p, 1)
        let devices = try (0..<9).map { try Device(p, $0) }
        for device in devices { #expect(try device.update(p).status == 0 && device.installed == "release 1\n") }
        // 10% at once, 50% after a day, all after two: started 25 hours ago, so 50% now.
        let start = Clock.now.addingTimeInterval(-25 * 3_600)
        try Self.publish(p, 2, ["--rollout", "10%@0h,50%@24h,100%@48h", "--rollout-start", Clock.rfc3339(start)])
        let expected = try Self.buckets(devices.map(\.id), name: "app", sequence: 2)
        #expect(expected.count == devices.count)
        var waiting: [Device] = []
        var eligible: [Device] = []
        for (device, bucket) in zip(devices, expected) {
            let checked = try device.update(p, ["--check"])
            #expect(checked.status == 0, "\(checked.stderr)")
            let rollout = try Self.rollout(checked)
            #expect(rollout["bucket"] as? Int == bucket, "the bucket is FORMAT.md's")
            #expect(rollout["percent"] as? Double == 50 && rollout["state"] as? String == "active")
            #expect(rollout["eligible"] as? Bool == (bucket < 5_000))
            #expect(!checked.stdoutText.contains(device.id) && !checked.stderr.contains(device.id), "the device id is never printed")
            if bucket < 5_000 {
                #expect(rollout["eligible_at"] is NSNull)
                eligible.append(device)
            } else {
                #expect(rollout["eligible_at"] as? String == Clock.rfc3339(start.addingTimeInterval(48 * 3_600)))
                waiting.append(device)
            }
        }
        try #require(!eligible.isEmpty && waiting.count >= 2, "buckets \(expected): both kinds of device are needed")
        let installs = try eligible[0].update(p)
        #expect(installs.status == 0 && eligible[0].installed == "release 2\n", "\(installs.stderr)")
        let waits = try waiting[0].update(p)
        #expect(waits.status == 0 && waiting[0].installed == "release 1\n", "\(waits.stderr)")
        #expect((try waits.json()["deferred"] as? String)?.hasPrefix("waiting: 1.2 (sequence 2) is rolling out to 50% of devices") == true, "\(waits.stdoutText)")
        let text = try CLI.run(["update", "--repository", p.metadataURL, "--tuf-metadata", waiting[0].metadata, "--channel", "stable", "--dest", waiting[0].dest,
                                "--tls-ca", p.server.root, "--state", waiting[0].state, "--device-id-file", waiting[0].idFile])
        #expect(text.status == 0 && text.stdoutText.contains("this device (bucket") && text.stdoutText.contains("keeps 1.1 (sequence 1)"), "\(text.stdoutText)")

        // The mirror's copy of today's metadata, served again later.
        let saved = p.work.directory.file("saved-metadata")
        try FileManager.default.copyItem(atPath: p.repo + "/metadata", toPath: saved)
        // Paused: still 50%, and no date for the devices it has not reached.
        let paused = try CLI.run(["repo", "rollout", p.repo, "app", "--pause"] + p.key)
        #expect(paused.status == 0 && paused.stdoutText.contains("paused at"), "\(paused.stderr)")
        try Self.refresh(p)
        let held = try Self.rollout(try waiting[0].update(p, ["--check"]))
        #expect(held["state"] as? String == "paused" && held["percent"] as? Double == 50 && held["eligible_at"] is NSNull, "\(held)")
        // A mirror serving the older metadata (the plan before the pause) is refused: TUF's rules.
        let current = p.work.directory.file("current-metadata")
        try FileManager.default.moveItem(atPath: p.repo + "/metadata", toPath: current)
        try FileManager.default.copyItem(atPath: saved, toPath: p.repo + "/metadata")
        let stale = try waiting[0].update(p, ["--check"])
        #expect(stale.status != 0 && ["rollback", "expired-metadata"].contains(UpdateCLITests.code(stale) ?? ""), "\(stale.stdoutText) \(stale.stderr)")
        try FileManager.default.removeItem(atPath: p.repo + "/metadata")
        try FileManager.default.moveItem(atPath: current, toPath: p.repo + "/metadata")

        // Halted: no device that lacks release 2 installs it, not even --ignore-rollout; one that has it keeps it.
        // Staged without a key: what the co-signers review names the change before they sign it.
        let staged = try p.check(CLI.run(["repo", "rollout", p.repo, "app-2.zip", "--halt", "--json"]))
        let digest = try #require(try staged.json()["digest"] as? String)
        let review = try p.check(CLI.run(["repo", "status", p.repo]))
        #expect(review.stdoutText.contains("app-2.zip: app 1.2 (sequence 2)") && review.stdoutText.contains("rollout 10%@0h,50%@1d,100%@2d from")
                && review.stdoutText.contains(", halted"), "\(review.stdoutText)")
        try p.check(CLI.run(["repo", "sign", p.repo, "--role", "targets", "--digest", digest] + p.key))
        try Self.refresh(p)
        let halted = try waiting[1].update(p, ["--ignore-rollout"])
        #expect(halted.status == 0 && waiting[1].installed == "release 1\n", "\(halted.stderr)")
        #expect((try halted.json()["deferred"] as? String)?.hasPrefix("halted:") == true, "\(halted.stdoutText)")
        let kept = try eligible[0].update(p)
        let keptRollout = try Self.rollout(kept)
        #expect(kept.status == 0 && eligible[0].installed == "release 2\n" && keptRollout["state"] as? String == "halted")

        // An emergency plan: every device at its next update.
        try p.check(CLI.run(["repo", "rollout", p.repo, "app", "--plan", "now"] + p.key))
        try Self.refresh(p)
        let now = try waiting[1].update(p)
        #expect(now.status == 0 && waiting[1].installed == "release 2\n", "\(now.stderr)")
        #expect((try Self.rollout(now))["percent"] as? Double == 100)
    }

    @Test("--ignore-rollout installs a release whose wave has not come; a device without an id file is told what to give")
    func ignoreRollout() throws {
        let p = try Publisher("rollout-ignore")
        try Self.publish(p, 1, ["--rollout", "0.01%@0h,100%@30d"])
        let devices = try (0..<4).map { try Device(p, 100 + $0) }
        let device = try #require(zip(devices, try Self.buckets(devices.map(\.id), name: "app", sequence: 1)).first { $0.1 > 0 }?.0)
        let waits = try device.update(p)
        #expect(waits.status == 0 && device.installed == nil, "\(waits.stderr)")
        let now = try device.update(p, ["--ignore-rollout"])
        #expect(now.status == 0 && device.installed == "release 1\n", "\(now.stderr)")
        let missing = try device.update(p, ["--device-id-file", p.work.directory.file("no-such-id")])
        #expect(missing.status != 0 && missing.stderr.contains("device-id-file"), "\(missing.stderr)")
    }

    @Test("hold and version-lock (config keys): update says held or locked and exits 0; a lock that allows the release installs it")
    func holds() throws {
        let p = try Publisher("rollout-holds")
        try Self.publish(p, 1)
        let device = try Device(p, 200)
        #expect(try device.update(p).status == 0)
        try Self.publish(p, 2)
        let config = p.work.directory.file("app.conf")
        func run(_ lines: String) throws -> ProcessResult {
            try Data(lines.utf8).write(to: URL(fileURLWithPath: config))
            return try CLI.run(["update", "--config", config, "--json"])
        }
        let base = """
        repository = "\(p.metadataURL)"
        tuf-metadata = "\(device.metadata)"
        channel = "stable"
        dest = "\(device.dest)"
        tls-ca = ["\(p.server.root)"]
        state = "\(device.state)"
        device-id-file = "\(device.idFile)"

        """
        let held = try run(base + "hold = true\n")
        #expect(held.status == 0 && device.installed == "release 1\n", "\(held.stderr)")
        let heldReport = try held.json()
        #expect((heldReport["deferred"] as? String)?.hasPrefix("held:") == true && heldReport["update_available"] as? Bool == true)
        let locked = try run(base + "version-lock = \"1.1\"\n")
        #expect(locked.status == 0 && device.installed == "release 1\n", "\(locked.stderr)")
        #expect((try locked.json()["deferred"] as? String)?.contains("version lock (version 1.1) excludes 1.2") == true, "\(locked.stdoutText)")
        let bad = try run(base + "version-lock = \"1 2\"\n")
        #expect(bad.status == 2 && bad.stderr.contains("--version-lock"), "\(bad.stderr)")
        let allowed = try run(base + "version-lock = 2\n")
        #expect(allowed.status == 0 && device.installed == "release 2\n", "\(allowed.stderr)")
        // --ignore-rollout is no config key: a file would opt a device out of every rollout.
        let ignored = try run(base + "ignore-rollout = true\n")
        #expect(ignored.status == 2 && ignored.stderr.contains("unknown key 'ignore-rollout'"), "\(ignored.stderr)")
    }
}

/// RFC 3339 times for the signed plans (the CLI tests do not link the library).
enum Clock {
    static func rfc3339(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }

    /// Now, to the second.
    static var now: Date { Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)) }
}
