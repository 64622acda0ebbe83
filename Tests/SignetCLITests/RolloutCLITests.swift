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
            try CLI.run(
                [
                    "update", "--repository", p.metadataURL, "--tuf-metadata", metadata, "--channel", "stable", "--dest", dest,
                    "--tls-ca", p.server.root, "--state", state, "--device-id-file", idFile, "--json"
                ] + extra)
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
    /// Packs, adds (signed with --key) and publishes release `sequence`; returns `repo add`'s run.
    @discardableResult
    static func publish(_ p: Publisher, _ sequence: Int, _ extra: [String] = []) throws -> ProcessResult {
        let tree = try TemporaryDirectory()
        try Data("release \(sequence)\n".utf8).write(to: URL(fileURLWithPath: tree.file("a.txt")))
        let package = p.work.directory.file("app-\(sequence).zip")
        try p.check(CLI.run(["pack", tree.path, "--name", "app", "--version", "1.\(sequence)", "--sequence", "\(sequence)", "--out", package] + p.key))
        let added = try p.check(CLI.run(["repo", "add", p.repo, package, "--channel", "stable"] + extra + p.key))
        try refresh(p)
        return added
    }

    static func refresh(_ p: Publisher) throws {
        try p.check(
            CLI.run([
                "repo", "refresh", p.repo, "--snapshot-key", p.work.privatePEM, "--timestamp-key", p.work.privatePEM,
                "--passphrase-file", p.work.passFile
            ]))
    }

    static func rollout(_ result: ProcessResult) throws -> [String: Any] {
        try #require(try result.json()["rollout"] as? [String: Any], "\(result.stdoutText)")
    }

    @Test(
        "A plan signed with the release: each device installs once its bucket is open, says when otherwise; pause holds the share, a stale mirror's older plan is refused, halt stops new installs, an emergency plan opens all; --ignore-rollout installs now"
    )
    func waves() throws {
        let p = try Publisher("rollout-waves")
        try Self.publish(p, 1)
        let devices = try (0..<9).map { try Device(p, $0) }
        for device in devices { #expect(try device.update(p).status == 0 && device.installed == "release 1\n") }
        // 10% at once, 50% after a day, all after two: started 25 hours ago, so 50% now.
        let start = Clock.now.addingTimeInterval(-25 * 3_600)
        let added = try Self.publish(p, 2, ["--rollout", "10%@0h,50%@24h,100%@48h", "--rollout-start", Clock.rfc3339(start)])
        // A given start already past: whoever signs is told the share it opens at once.
        #expect(
            added.stderr.contains("its plan counts from \(Clock.rfc3339(start)), which is past: published now, it opens 50% of devices at once"),
            "\(added.stderr)")
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
        #expect(
            (try waits.json()["deferred"] as? String)?.hasPrefix("waiting: 1.2 (sequence 2) is rolling out to 50% of devices") == true, "\(waits.stdoutText)")
        let text = try CLI.run([
            "update", "--repository", p.metadataURL, "--tuf-metadata", waiting[0].metadata, "--channel", "stable", "--dest", waiting[0].dest,
            "--tls-ca", p.server.root, "--state", waiting[0].state, "--device-id-file", waiting[0].idFile
        ])
        #expect(text.status == 0 && text.stdoutText.contains("this device (bucket") && text.stdoutText.contains("keeps 1.1 (sequence 1)"), "\(text.stdoutText)")
        // The publisher watches it: plan, state, the share open now, the next step, what new devices get.
        let watched = try p.check(CLI.run(["repo", "status", p.repo, "--json"]))
        let listed = try #require(try watched.json()["packages"] as? [[String: Any]])
        let watchedRollout = try #require(listed.first { $0["sequence"] as? Int == 2 }?["rollout"] as? [String: Any], "\(listed)")
        #expect(
            watchedRollout["state"] as? String == "active" && watchedRollout["percent"] as? Double == 50
                && watchedRollout["next_percent"] as? Double == 100
                && watchedRollout["next_at"] as? String == Clock.rfc3339(start.addingTimeInterval(48 * 3_600)), "\(watchedRollout)")
        let offers = try #require(try watched.json()["new_devices"] as? [[String: Any]])
        #expect(
            offers.count == 1 && (offers[0]["releases"] as? [[String: Any]])?.map { "\($0["sequence"] ?? "")@\($0["percent"] ?? "")" } == ["2@50", "1@100"],
            "\(offers)")
        let watchedText = try p.check(CLI.run(["repo", "status", p.repo]))
        #expect(
            watchedText.stdoutText.contains("active, 50% of devices now; next 100% at")
                && watchedText.stdoutText.contains(
                    "new devices on stable get app 1.2 (sequence 2) where its wave has reached them (50%), else 1.1 (sequence 1)"),
            "\(watchedText.stdoutText)")
        // Which release each chose, and why (FORMAT §7, "Which release a device installs").
        let choice = try #require(try waits.json()["choice"] as? [String: Any])
        #expect(
            (choice["chosen"] as? [String: Any])?["sequence"] as? Int == 1 && choice["reason"] as? String == "wave-not-reached"
                && (choice["newest"] as? [String: Any])?["sequence"] as? Int == 2, "\(choice)")
        #expect((try installs.json()["choice"] as? [String: Any])?["reason"] as? String == "newest")
        // A new device whose wave has not come gets the release before (it is not left empty).
        let fresh = try Device(p, 40)
        let freshBucket = try #require(try Self.buckets([fresh.id], name: "app", sequence: 2).first)
        let freshRun = try fresh.update(p)
        #expect(freshRun.status == 0 && fresh.installed == (freshBucket < 5_000 ? "release 2\n" : "release 1\n"), "\(freshRun.stdoutText) \(freshRun.stderr)")

        // The mirror's copy of today's metadata, served again later.
        let saved = p.work.directory.file("saved-metadata")
        try FileManager.default.copyItem(atPath: p.repo + "/metadata", toPath: saved)
        // Paused: still 50%, and no date for the devices it has not reached.
        let paused = try CLI.run(["repo", "rollout", p.repo, "app", "--pause"] + p.key)
        #expect(paused.status == 0 && paused.stdoutText.contains("paused at"), "\(paused.stderr)")
        try Self.refresh(p)
        let held = try Self.rollout(try waiting[0].update(p, ["--check"]))
        #expect(held["state"] as? String == "paused" && held["percent"] as? Double == 50 && held["eligible_at"] is NSNull, "\(held)")
        let pausedStatus = try p.check(CLI.run(["repo", "status", p.repo]))
        #expect(
            pausedStatus.stdoutText.contains(": paused at ") && pausedStatus.stdoutText.contains(", 50% of devices now; no next step"),
            "\(pausedStatus.stdoutText)")
        // A mirror serving the older metadata (the plan before the pause) is refused: TUF's rules.
        let current = p.work.directory.file("current-metadata")
        try FileManager.default.moveItem(atPath: p.repo + "/metadata", toPath: current)
        try FileManager.default.copyItem(atPath: saved, toPath: p.repo + "/metadata")
        let stale = try waiting[0].update(p, ["--check"])
        #expect(stale.status != 0 && ["rollback", "expired-metadata"].contains(UpdateCLITests.code(stale) ?? ""), "\(stale.stdoutText) \(stale.stderr)")
        try FileManager.default.removeItem(atPath: p.repo + "/metadata")
        try FileManager.default.moveItem(atPath: current, toPath: p.repo + "/metadata")
        // Resumed: active again, from where it stopped.
        try p.check(CLI.run(["repo", "rollout", p.repo, "app", "--resume"] + p.key))
        try Self.refresh(p)
        let resumed = try Self.rollout(try waiting[0].update(p, ["--check"]))
        #expect(resumed["state"] as? String == "active" && resumed["percent"] as? Double == 50 && resumed["eligible_at"] is String, "\(resumed)")

        // Halted: no device that lacks release 2 installs it, not even --ignore-rollout; one that has it keeps it.
        // Staged without a key: what the co-signers review names the change before they sign it.
        let staged = try p.check(CLI.run(["repo", "rollout", p.repo, "app-2.zip", "--halt", "--json"]))
        let digest = try #require(try staged.json()["digest"] as? String)
        let review = try p.check(CLI.run(["repo", "status", p.repo]))
        #expect(
            review.stdoutText.contains("app-2.zip: app 1.2 (sequence 2)") && review.stdoutText.contains("rollout 10%@0h,50%@1d,100%@2d from")
                && review.stdoutText.contains(", halted"), "\(review.stdoutText)")
        try p.check(CLI.run(["repo", "sign", p.repo, "--role", "targets", "--digest", digest] + p.key))
        try Self.refresh(p)
        let haltedStatus0 = try p.check(CLI.run(["repo", "status", p.repo]))
        #expect(
            haltedStatus0.stdoutText.contains(": halted, 0% of devices now; no next step")
                && haltedStatus0.stdoutText.contains("new devices on stable get app 1.1 (sequence 1)\n"), "\(haltedStatus0.stdoutText)")
        let halted = try waiting[1].update(p, ["--ignore-rollout"])
        #expect(halted.status == 0 && waiting[1].installed == "release 1\n", "\(halted.stderr)")
        #expect((try halted.json()["deferred"] as? String)?.hasPrefix("halted:") == true, "\(halted.stdoutText)")
        let kept = try eligible[0].update(p)
        let keptRollout = try Self.rollout(kept)
        #expect(kept.status == 0 && eligible[0].installed == "release 2\n" && keptRollout["state"] as? String == "halted")
        // No other path installs or vouches for it either (issue 62): unpack URL and reverify
        // with the device's metadata name the halt, unless told it is meant (dangerous).
        let url =
            p.server.url("rollout-waves/targets/")
            + (try FileManager.default.contentsOfDirectory(atPath: p.repo + "/targets").first { $0.hasSuffix(".app-2.zip") } ?? "")
        let other = p.work.directory.file("halted-unpack")
        let unpacked = try CLI.run(["unpack", url, "--dest", other, "--tuf-metadata", waiting[1].metadata, "--tls-ca", p.server.root])
        #expect(unpacked.status == 3 && unpacked.stderr.contains("halted its rollout"), "\(unpacked.stderr)")
        #expect(!FileManager.default.fileExists(atPath: other + "/a.txt"))
        let reverified = try CLI.run(["reverify", eligible[0].dest, "--tuf-metadata", eligible[0].metadata])
        #expect(
            reverified.status != 0 && (reverified.stdoutText + reverified.stderr).contains("halted its rollout"),
            "\(reverified.stdoutText) \(reverified.stderr)")
        let allowed = try CLI.run(["reverify", eligible[0].dest, "--tuf-metadata", eligible[0].metadata, "--allow-halted-release"])
        #expect(allowed.status == 0, "\(allowed.stdoutText) \(allowed.stderr)")
        // status DIR says so, on both.
        let haltedStatus = try CLI.run(["status", eligible[0].dest])
        #expect(
            haltedStatus.stdoutText.contains("channel:  halted: the publisher halted the rollout of 1.2 (sequence 2); this device keeps it"),
            "\(haltedStatus.stdoutText)")
        let lacking = try CLI.run(["status", waiting[1].dest, "--json"])
        #expect(((try lacking.json()["channel"] as? [String: Any])?["note"] as? String)?.hasPrefix("halted:") == true, "\(lacking.stdoutText)")

        // Resuming a halted release says how to reopen it; a key the targets role does not
        // name is refused before anything is staged.
        let resumeHalted = try CLI.run(["repo", "rollout", p.repo, "app", "--resume"])
        #expect(resumeHalted.status == 2 && resumeHalted.stderr.contains("reopened with a new plan (--plan PLAN"), "\(resumeHalted.stderr)")
        let stranger = try Workspace()
        let wrongKey = try CLI.run(["repo", "rollout", p.repo, "app", "--plan", "now", "--key", stranger.privatePEM, "--passphrase-file", stranger.passFile])
        #expect(wrongKey.status == 3 && wrongKey.stderr.contains("not a targets key") && wrongKey.stderr.contains("nothing was staged"), "\(wrongKey.stderr)")
        #expect(!FileManager.default.fileExists(atPath: p.repo + "/staging/targets.json"), "nothing staged")
        // An emergency plan: every device at its next update.
        try p.check(CLI.run(["repo", "rollout", p.repo, "app", "--plan", "now"] + p.key))
        try Self.refresh(p)
        let now = try waiting[1].update(p)
        #expect(now.status == 0 && waiting[1].installed == "release 2\n", "\(now.stderr)")
        #expect((try Self.rollout(now))["percent"] as? Double == 100)
        let cleared = try CLI.run(["status", waiting[1].dest, "--json"])
        #expect(try cleared.json()["channel"] is NSNull, "installed: nothing held back: \(cleared.stdoutText)")
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
        let status = try CLI.run(["status", device.dest])
        #expect(status.stdoutText.contains("channel:  held: this device installs nothing new (hold)"), "\(status.stdoutText)")
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

    @Test("README's 'Rolling out a release' block runs as written: plan, watch, pause, halt, the emergency fix installed; its config keys parse")
    func readme() throws {
        let server = try TUFCLITests.shared.get()
        let work = try TemporaryDirectory()
        let d = work.path
        let www = server.www + "/rollout-readme-\(getpid())"
        let environment: [String: String?] = [
            "PATH": URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "SIGNET_PASSPHRASE": "one key"
        ]
        func shell(_ script: String) throws -> ProcessResult {
            let ran = try SignetTestSupport.run("bash", ["-euo", "pipefail", "-c", script], environment: environment, directory: d)
            try #require(ran.status == 0, "\(script)\n\(ran.stderr)\n\(ran.stdoutText)")
            return ran
        }
        // The one-key repository of the block before it, with release 1.0.0; the packages the block adds.
        let oneKey = try UpdateCLITests.readmeBlock("tuf-one-key").replacingOccurrences(of: "/srv/www/app", with: www)
        try FileManager.default.createDirectory(atPath: d + "/dist", withIntermediateDirectories: true)
        try Data("app 1.0.0\n".utf8).write(to: URL(fileURLWithPath: d + "/dist/version.txt"))
        _ = try shell(oneKey)
        for (version, sequence) in [("1.1.0", 110), ("1.1.1", 111)] {
            try Data("app \(version)\n".utf8).write(to: URL(fileURLWithPath: d + "/dist/version.txt"))
            _ = try shell(
                "signet pack dist --key release/private_key.pem --passphrase-env SIGNET_PASSPHRASE --name app --version \(version) --sequence \(sequence) --out app-\(version).zip"
            )
        }
        // A device on 1.0.0, by its config file.
        let metadata = d + "/metadata", dest = d + "/opt/app", config = d + "/app.conf"
        #expect(try CLI.run(["tuf", "init", "--metadata-dir", metadata, www + "/metadata/1.root.json"]).status == 0)
        try Data("0123456789abcdef0123456789abcdef\n".utf8).write(to: URL(fileURLWithPath: d + "/machine-id"))
        let base = """
            repository = "\(server.url("rollout-readme-\(getpid())/metadata/"))"
            tuf-metadata = "\(metadata)"
            channel = "stable"
            dest = "\(dest)"
            tls-ca = ["\(server.root)"]
            device-id-file = "\(d)/machine-id"

            """
        try Data(base.utf8).write(to: URL(fileURLWithPath: config))
        #expect(try CLI.run(["update", "--config", config]).status == 0)
        #expect((try? String(contentsOfFile: dest + "/version.txt", encoding: .utf8)) == "app 1.0.0\n")

        let block = try UpdateCLITests.readmeBlock("rollout").replacingOccurrences(of: "/srv/www/app", with: www)
            .replacingOccurrences(of: "/etc/signet/update.d/app.conf", with: config)
        let ran = try shell(block)
        // The watch step's document: this device's place in the plan.
        #expect(
            ran.stdoutText.contains("\"bucket\"") && ran.stdoutText.contains("\"percent\" : 1,") && ran.stdoutText.contains("\"eligible_at\""),
            "\(ran.stdoutText)")
        #expect(ran.stdoutText.contains("paused at") && ran.stdoutText.contains("halted"), "\(ran.stdoutText)")
        #expect((try? String(contentsOfFile: dest + "/version.txt", encoding: .utf8)) == "app 1.1.1\n", "\(ran.stdoutText)")

        // The config lines the section shows are config keys update takes.
        let readme = try String(contentsOfFile: UpdateCLITests.repository + "/README.md", encoding: .utf8)
        let section = try #require(readme.components(separatedBy: "### Rolling out a release").dropFirst().first)
        let toml = try #require(section.components(separatedBy: "```toml\n").dropFirst().first?.components(separatedBy: "```").first)
        try Data((base + toml.replacingOccurrences(of: "device-id-file = \"/var/lib/app/device-id\"", with: "")).utf8).write(to: URL(fileURLWithPath: config))
        let checked = try CLI.run(["update", "--config", config, "--check", "--json"])
        #expect(checked.status == 0, "\(checked.stderr)")
    }

    /// `HH:MM..HH:MM` in UTC from `from` to `to` hours after now (the CLI runs with TZ=UTC).
    static func window(fromHours from: Double, toHours to: Double) -> String {
        let calendar: Calendar = {
            var c = Calendar(identifier: .gregorian); c.timeZone = TimeZone(identifier: "UTC")!; return c
        }()
        func clock(_ hours: Double) -> String {
            let parts = calendar.dateComponents([.hour, .minute], from: Date().addingTimeInterval(hours * 3_600))
            return String(format: "%02d:%02d", parts.hour!, parts.minute!)
        }
        return "\(clock(from))..\(clock(to))"
    }

    @Test(
        "window: outside it the release is staged, verified and kept, exit 0; inside it what was staged is installed without fetching it again. pre-install: exit 75 is not now (exit 0), another exit refuses (exit 1), 0 installs"
    )
    func windowAndPreInstall() throws {
        let p = try Publisher("rollout-window")
        let device = try Device(p, 300)
        // Many files, so that fetching them again would show.
        func publish(_ sequence: Int, filesOf: Int? = nil) throws {
            let tree = try TemporaryDirectory()
            try Data("release \(sequence)\n".utf8).write(to: URL(fileURLWithPath: tree.file("a.txt")))
            let files = filesOf ?? sequence
            for index in 0..<40 {
                try Data((0..<2_000).map { UInt8(truncatingIfNeeded: $0 &* (index + files * 41)) }).write(to: URL(fileURLWithPath: tree.file("f\(index).bin")))
            }
            let package = p.work.directory.file("app-\(sequence).zip")
            try p.check(CLI.run(["pack", tree.path, "--name", "app", "--version", "1.\(sequence)", "--sequence", "\(sequence)", "--out", package] + p.key))
            try p.check(CLI.run(["repo", "add", p.repo, package, "--channel", "stable"] + p.key))
            try Self.refresh(p)
        }
        try publish(1)
        #expect(try device.update(p).status == 0 && device.installed == "release 1\n")
        try publish(2)
        let utc = ["TZ": "UTC"]
        func update(_ extra: [String]) throws -> ProcessResult {
            try CLI.run(
                [
                    "update", "--repository", p.metadataURL, "--tuf-metadata", device.metadata, "--channel", "stable", "--dest", device.dest,
                    "--tls-ca", p.server.root, "--state", device.state, "--device-id-file", device.idFile, "--json"
                ] + extra, environment: utc)
        }
        let outside = try update(["--window", "Mon..Sun " + Self.window(fromHours: 2, toHours: 3)])
        #expect(outside.status == 0 && device.installed == "release 1\n", "\(outside.stderr)")
        #expect((try outside.json()["deferred"] as? String)?.contains("outside the maintenance window") == true, "\(outside.stdoutText)")
        let parent = (device.dest as NSString).deletingLastPathComponent
        let beside = try FileManager.default.contentsOfDirectory(atPath: parent)
        #expect(beside.contains { $0.contains("staging") || $0.contains("salvage") }, "the staged release is kept beside DIR: \(beside)")
        let inside = try update(["--window", Self.window(fromHours: -1, toHours: 1)])
        #expect(inside.status == 0 && device.installed == "release 2\n", "\(inside.stderr)")
        let transfer = try #require(try inside.json()["transfer"] as? [String: Any], "\(inside.stdoutText)")
        #expect(transfer["files_fetched"] as? Int == 0, "what was staged outside the window is installed, not fetched again: \(transfer)")

        try publish(3)
        let notNow = try update(["--pre-install", "sh -c 'echo busy; exit 75'"])
        #expect(notNow.status == 0 && device.installed == "release 2\n", "\(notNow.stderr)")
        #expect((try notNow.json()["deferred"] as? String)?.contains("said not now (exit 75): busy") == true, "\(notNow.stdoutText)")
        let refused = try update(["--pre-install", "sh -c 'echo battery low; exit 3'"])
        #expect(refused.status == 1 && UpdateCLITests.code(refused) == "pre-install-refused" && device.installed == "release 2\n", "\(refused.stdoutText)")
        #expect(refused.stderr.contains("battery low") || refused.stdoutText.contains("battery low"))
        let agreed = try update(["--pre-install", "sh -c 'test \"$SIGNET_EVENT:$SIGNET_NEW_SEQUENCE:$SIGNET_OLD_SEQUENCE\" = pre-install:3:2'"])
        #expect(agreed.status == 0 && device.installed == "release 3\n", "\(agreed.stdoutText) \(agreed.stderr)")
        let agreedHooks = try #require(try agreed.json()["hooks"] as? [[String: Any]], "\(agreed.stdoutText)")
        #expect(agreedHooks.map { $0["hook"] as? String } == ["pre-install"], "the pre-install command that said yes is reported: \(agreedHooks)")

        // Release 4 changes a.txt only, deferred by the window, then installed: its 40 unchanged
        // files were shared with DIR (hard links) when staged, and are reported so.
        try publish(4, filesOf: 3)
        let deferred = try update(["--window", "Mon..Sun " + Self.window(fromHours: 2, toHours: 3)])
        #expect(deferred.status == 0 && device.installed == "release 3\n", "\(deferred.stderr)")
        let resumed = try update(["--window", Self.window(fromHours: -1, toHours: 1), "--pre-install", "true"])
        #expect(resumed.status == 0 && device.installed == "release 4\n", "\(resumed.stderr)")
        let report = try resumed.json()
        #expect(report["files_shared"] as? Int == 40 && report["files_copied"] as? Int == 0, "as on disk: \(resumed.stdoutText)")
        #expect((report["hooks"] as? [[String: Any]])?.first?["hook"] as? String == "pre-install", "\(resumed.stdoutText)")
        var inode = stat(), installedInode = stat()
        let kept = (device.dest as NSString).deletingLastPathComponent + "/.app.signet-previous"
        #expect(
            lstat(device.dest + "/f7.bin", &inode) == 0 && lstat(kept + "/f7.bin", &installedInode) == 0 && inode.st_ino == installedInode.st_ino,
            "f7.bin is one file in both releases")
        let bad = try update(["--window", "Mon..Fri 2:00..4:00"])
        #expect(bad.status == 2 && bad.stderr.contains("HH:MM..HH:MM"), "\(bad.stderr)")
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
