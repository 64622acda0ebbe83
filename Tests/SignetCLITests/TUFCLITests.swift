import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// Issue 37: channels as TUF repositories. `signet repo` publishes, `signet update --repository`
/// and `signet tuf` consume, against a real nginx (one for the suite); python-tuf on the other
/// side both ways; what a stolen key of each role can and cannot do. Not serialized (issue 50):
/// each test has its own repository on the shared server, and none waits for real time.
@Suite("TUF: signet repo, signet update --repository, signet tuf against nginx and python-tuf")
struct TUFCLITests {
    nonisolated(unsafe) static let shared = Result { try HTTPSServer.site("TUFCLITests") }
    static let tool = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("tuf_tool.py").path

    static func code(_ result: ProcessResult) -> String? {
        (try? result.json()["error"] as? [String: Any])?["code"] as? String
    }

    static func python(_ arguments: [String], environment: [String: String?] = [:]) throws -> ProcessResult {
        try SignetTestSupport.run("python3", [tool] + arguments, environment: environment)
    }

    /// A publisher with a repository under nginx's www/NAME (root 2 of 2, targets 2 of 2,
    /// separate online snapshot and timestamp keys), and a device following channel `stable`.
    final class Fleet {
        let server: HTTPSServer
        let work: TemporaryDirectory
        let name: String
        var repo: String { server.www + "/" + name }
        var metadataURL: String { server.url(name + "/metadata/") }

        init(_ name: String, lifetimes: [String] = [], targetsThreshold: Int = 2) throws {
            server = try TUFCLITests.shared.get()
            work = try TemporaryDirectory()
            self.name = name
            // Eight distinct keys, made once per process (KeyPool); another Fleet of the same
            // test gets eight others.
            let slot = KeyPool.nextSlot()
            for key in ["root1", "root2", "rel1", "rel2", "rel3", "snap", "ts", "evil"] {
                _ = try KeyPool.copy("fleet-" + key, slot: slot, to: work.file("keys/" + key), passphraseFile: nil)
            }
            try check(
                CLI.run(
                    [
                        "repo", "init", repo, "--root-key", pub("root1"), "--root-key", pub("root2"), "--root-threshold", "2",
                        "--targets-key", pub("rel1"), "--targets-key", pub("rel2"), "--targets-threshold", String(targetsThreshold),
                        "--snapshot-key", pub("snap"), "--timestamp-key", pub("ts")
                    ] + lifetimes))
            try signRoot()
        }

        func pub(_ key: String) -> String { work.file("keys/\(key)/public_key.der") }
        func priv(_ key: String) -> String { work.file("keys/\(key)/private_key.pem") }

        @discardableResult
        func check(_ result: ProcessResult) throws -> ProcessResult {
            guard result.status == 0 else { throw SupportError("signet failed (\(result.status)): \(result.stderr)") }
            return result
        }

        func signRoot(_ keys: [String] = ["root1", "root2"]) throws {
            for key in keys { try check(sign("root", key)) }
        }

        /// The newest targets version published.
        func trustedTargetsVersion() -> Int {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: repo + "/metadata")) ?? []
            return names.compactMap { $0.hasSuffix(".targets.json") ? Int($0.dropLast(".targets.json".count)) : nil }.max() ?? 0
        }

        /// The digest of the staged `role` (what `repo status` shows a signer).
        func digest(_ role: String) throws -> String {
            try check(CLI.run(["repo", "status", repo, "--staged-digest", role])).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// `repo sign` with `key`, for the staged `role` as it is now.
        func sign(_ role: String, _ key: String, _ extra: [String] = []) throws -> ProcessResult {
            try CLI.run(["repo", "sign", repo, "--role", role, "--key", priv(key), "--digest", try digest(role), "--json"] + extra)
        }

        /// Packs release `sequence` signed by `key` into the work folder.
        func pack(_ sequence: Int, key: String = "rel1", text: String? = nil) throws -> String {
            let tree = work.file("tree-\(sequence)-\(key)")
            try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
            try Data((text ?? "release \(sequence)\n").utf8).write(to: URL(fileURLWithPath: tree + "/a.txt"))
            try Data("same in every release\n".utf8).write(to: URL(fileURLWithPath: tree + "/b.txt"))
            let out = work.file("app-\(sequence).zip")
            try? FileManager.default.removeItem(atPath: out)
            try check(CLI.run(["pack", tree, "--key", priv(key), "--name", "app", "--version", "1.\(sequence)", "--sequence", "\(sequence)", "--out", out]))
            return out
        }

        /// Publishes release `sequence`: add, both targets signatures, refresh.
        func release(_ sequence: Int, signers: [String] = ["rel1", "rel2"], packKey: String = "rel1") throws {
            try check(CLI.run(["repo", "add", repo, try pack(sequence, key: packKey), "--channel", "stable", "--json"]))
            for key in signers { try check(sign("targets", key)) }
            try refresh()
        }

        func refresh() throws {
            try check(CLI.run(["repo", "refresh", repo, "--snapshot-key", priv("snap"), "--timestamp-key", priv("ts"), "--json"]))
        }

        /// What a thief with the online keys publishes with a tool of their own (`signet repo
        /// refresh` names only a targets version the root accepts): a snapshot naming targets
        /// version `targets`, and a timestamp naming that snapshot. Returns the snapshot version.
        @discardableResult
        func publishAsThief(targets: Int) throws -> Int {
            let snapshots =
                try FileManager.default.contentsOfDirectory(atPath: repo + "/metadata")
                .compactMap { $0.hasSuffix(".snapshot.json") ? Int($0.dropLast(".snapshot.json".count)) : nil }.max() ?? 0
            try resign(
                "\(snapshots).snapshot.json", keys: ["snap"],
                edits: ["s['version'] = \(snapshots + 1)", "s['meta'] = {'targets.json': {'version': \(targets)}}"],
                out: "\(snapshots + 1).snapshot.json")
            try resign("timestamp.json", keys: ["ts"], edits: ["s['version'] += 1", "s['meta'] = {'snapshot.json': {'version': \(snapshots + 1)}}"])
            return snapshots + 1
        }

        /// A device: its metadata folder made from the repository's first root.
        func device(_ label: String = "device") throws -> Device {
            let device = Device(fleet: self, folder: work.file(label))
            try check(CLI.run(["tuf", "init", "--metadata-dir", device.metadata, repo + "/metadata/1.root.json"]))
            return device
        }

        /// Re-signs a published metadata file with `keys` after `edits` (an attacker's tool).
        func resign(_ file: String, keys: [String], root: String = "1.root.json", edits: [String] = [], out: String? = nil) throws {
            let path = repo + "/metadata/" + file
            let result = try TUFCLITests.python(
                ["resign", path, repo + "/metadata/" + root, out.map { repo + "/metadata/" + $0 } ?? path]
                    + keys.map(priv) + edits.flatMap { ["--edit", $0] })
            guard result.status == 0 else { throw SupportError("resign: \(result.stderr)") }
        }
    }

    struct Device {
        let fleet: Fleet
        let folder: String
        var metadata: String { folder + "/metadata" }
        var dest: String { folder + "/app" }

        /// `signet update` of the device; with `later`, under a clock that far ahead (libfaketime's
        /// `+8d`), so that no test waits for metadata to expire (issue 50).
        func update(_ extra: [String] = [], later offset: String? = nil) throws -> ProcessResult {
            let arguments =
                [
                    "update", "--repository", fleet.metadataURL, "--tuf-metadata", metadata, "--channel", "stable", "--dest", dest,
                    "--tls-ca", fleet.server.root, "--json"
                ] + extra
            return try offset.map { try RepositoryKeepingCLITests.later($0, arguments) } ?? CLI.run(arguments)
        }

        func installed() -> String? { try? String(contentsOfFile: dest + "/a.txt", encoding: .utf8) }

        func trustedVersion(_ role: String) -> Int? {
            guard let data = FileManager.default.contents(atPath: "\(metadata)/\(role).json"),
                let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
            else { return nil }
            return (json["signed"] as? [String: Any])?["version"] as? Int
        }
    }

    @Test("publish with m-of-n keys and update: installs; up to date; a new release installs; a lower sequence is refused; --check changes nothing")
    func publishAndUpdate() throws {
        let fleet = try Fleet("cycle")
        try fleet.release(1)
        let device = try fleet.device()
        let first = try device.update()
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try first.json()["updated"] as? Bool == true)
        #expect(device.installed() == "release 1\n")

        let again = try device.update()
        let againReport = try again.json()
        #expect(again.status == 0 && againReport["updated"] as? Bool == false && againReport["update_available"] as? Bool == false, "\(again.stdoutText)")

        // One targets signature of two publishes nothing.
        try fleet.check(CLI.run(["repo", "add", fleet.repo, try fleet.pack(2), "--channel", "stable"]))
        let half = try fleet.check(fleet.sign("targets", "rel1"))
        #expect(try half.json()["published"] as? Bool == false)
        try fleet.refresh()
        #expect(try device.update().json()["update_available"] as? Bool == false)
        try fleet.check(fleet.sign("targets", "rel2"))
        try fleet.refresh()
        let checked = try device.update(["--check"])
        #expect(try checked.json()["update_available"] as? Bool == true)
        #expect(device.installed() == "release 1\n")
        let second = try device.update()
        let secondReport = try second.json()
        #expect(second.status == 0 && secondReport["updated"] as? Bool == true, "\(second.stderr)")
        #expect(device.installed() == "release 2\n")

        // The channel never goes back by accident; on purpose, devices say so and keep theirs.
        let lower = try CLI.run(["repo", "add", fleet.repo, try fleet.pack(1), "--channel", "stable", "--json"])
        #expect(lower.status == 1 && Self.code(lower) == "rollback", "\(lower.stdoutText)")
        let republished = fleet.work.file("app-1-again.zip")
        try FileManager.default.copyItem(atPath: try fleet.pack(1), toPath: republished)
        try fleet.check(CLI.run(["repo", "add", fleet.repo, republished, "--channel", "stable", "--allow-lower-sequence"]))
        for key in ["rel1", "rel2"] { try fleet.check(fleet.sign("targets", key)) }
        try fleet.refresh()
        let older = try device.update()
        let olderReport = try older.json()
        #expect(older.status == 0 && olderReport["channel_is_older"] as? Bool == true, "\(older.stdoutText)")
        let text = try CLI.run([
            "update", "--repository", fleet.metadataURL, "--tuf-metadata", device.metadata, "--channel", "stable",
            "--dest", device.dest, "--tls-ca", fleet.server.root
        ])
        #expect(text.stderr.contains("names an older release than installed") && !text.stdoutText.contains("up to date"), "\(text.stdoutText)\(text.stderr)")
        #expect(device.installed() == "release 2\n")

        // tuf init again (a new image) drops the stored metadata of the old root, and nothing else.
        let other = device.metadata + "/notes.json"
        try Data("{\"mine\": true}".utf8).write(to: URL(fileURLWithPath: other))
        let copy = fleet.work.file("metadata-copy")
        try FileManager.default.copyItem(atPath: device.metadata, toPath: copy)
        try fleet.check(CLI.run(["tuf", "init", "--metadata-dir", copy, fleet.repo + "/metadata/1.root.json"]))
        let kept = try FileManager.default.contentsOfDirectory(atPath: copy).filter { !$0.hasPrefix(".") }.sorted()
        #expect(kept == ["notes.json", "root.json"], "\(kept)")
        try FileManager.default.removeItem(atPath: other)

        // The device's one source of trust verifies its tree and packages offline too.
        let reverified = try CLI.run(["reverify", device.dest, "--tuf-metadata", device.metadata, "--json"])
        #expect(reverified.status == 0, "\(reverified.stdoutText)")
        let foreign = try CLI.run(["unpack", try fleet.pack(7, key: "evil"), "--dest", fleet.work.file("other"), "--tuf-metadata", device.metadata, "--json"])
        #expect(foreign.status == 3 && Self.code(foreign) == "untrusted-signer", "\(foreign.stdoutText)")
        let mixed = try CLI.run(["tuf", "refresh", "--metadata-dir", device.metadata, "--metadata-url", fleet.metadataURL, "--pubkey", fleet.pub("rel1")])
        #expect(mixed.status == 2, "\(mixed.stderr)")
    }

    @Test("update --repair: a tree that no longer checks whole is reinstalled fetching only what differs; a whole one is up to date")
    func repairThroughUpdate() throws {
        let fleet = try Fleet("repair")
        try fleet.release(1)
        let device = try fleet.device()
        #expect(try device.update().status == 0)
        let whole = try device.update(["--repair"])
        let wholeReport = try whole.json()
        #expect(whole.status == 0 && wholeReport["updated"] as? Bool == false && (wholeReport["repaired"] as? [String]) == [], "\(whole.stdoutText)")

        try Data("tampered\n".utf8).write(to: URL(fileURLWithPath: device.dest + "/a.txt"))
        #expect(try device.update().json()["updated"] as? Bool == false, "without --repair the release is up to date")
        #expect(device.installed() == "tampered\n")
        let repaired = try device.update(["--repair"])
        let report = try repaired.json()
        #expect(repaired.status == 0 && report["updated"] as? Bool == true, "\(repaired.stdoutText) \(repaired.stderr)")
        #expect((report["repaired"] as? [String])?.first?.hasPrefix("a.txt: ") == true, "\(report)")
        let transfer = report["transfer"] as? [String: Any]
        #expect(
            transfer?["files_fetched"] as? Int == 1 && transfer?["files_reused"] as? Int == 1,
            "only the damaged file is fetched: \(String(describing: transfer))")
        #expect(device.installed() == "release 1\n")
        #expect(try CLI.run(["reverify", device.dest, "--tuf-metadata", device.metadata]).status == 0)
    }

    @Test("a package not signed by a targets key is refused by repo add; keys of other roles cannot sign targets")
    func publisherRefusals() throws {
        let fleet = try Fleet("refusals")
        let foreign = try CLI.run(["repo", "add", fleet.repo, try fleet.pack(1, key: "evil"), "--channel", "stable", "--json"])
        #expect(foreign.status == 3 && Self.code(foreign) == "untrusted-signer", "\(foreign.stdoutText)")
        try fleet.check(CLI.run(["repo", "add", fleet.repo, try fleet.pack(1), "--channel", "stable"]))
        let wrongRole = try fleet.sign("targets", "snap")
        #expect(wrongRole.status == 3 && Self.code(wrongRole) == "untrusted-signer", "\(wrongRole.stdoutText)")
        let badThreshold = try CLI.run([
            "repo", "init", fleet.work.file("other"), "--root-key", fleet.pub("root1"), "--root-threshold", "2",
            "--targets-key", fleet.pub("rel1"), "--snapshot-key", fleet.pub("snap"), "--timestamp-key", fleet.pub("ts"), "--json"
        ])
        #expect(badThreshold.status == 2 && Self.code(badThreshold) == "usage", "\(badThreshold.stdoutText)")
    }

    @Test("a stolen targets key cannot ship a package when the targets threshold is 2")
    func stolenTargetsKey() throws {
        let fleet = try Fleet("stolen-targets")
        try fleet.release(1)
        let device = try fleet.device()
        try fleet.check(device.update())
        // The thief has rel1 and (worse) the online keys: stages an evil release, signs it with
        // rel1 alone, publishes it as the next targets version and refreshes.
        try fleet.check(CLI.run(["repo", "add", fleet.repo, try fleet.pack(9, text: "evil\n"), "--channel", "stable"]))
        try fleet.check(fleet.sign("targets", "rel1"))
        try FileManager.default.copyItem(atPath: fleet.repo + "/staging/targets.json", toPath: fleet.repo + "/metadata/2.targets.json")
        // signet's own refresh will not name it (issue 49): the root does not accept it.
        let refused = try CLI.run(["repo", "refresh", fleet.repo, "--snapshot-key", fleet.priv("snap"), "--timestamp-key", fleet.priv("ts"), "--json"])
        let named = try refused.json()["targets"] as? Int
        #expect(refused.status == 0 && named == 1, "\(refused.stdoutText)")
        try fleet.publishAsThief(targets: 2)
        let result = try device.update()
        #expect(result.status == 3 && Self.code(result) == "threshold-not-met", "\(result.stdoutText)")
        #expect(device.installed() == "release 1\n")
    }

    @Test("no key of targets, snapshot or timestamp can change the keys a device trusts; m-1 root signatures rotate nothing")
    func onlyRootChangesTrust() throws {
        let fleet = try Fleet("trust")
        try fleet.release(1)
        let device = try fleet.device()
        try fleet.check(device.update())
        // Every online and release key together sign a root that adds the thief's key.
        try fleet.resign(
            "1.root.json", keys: ["rel1", "rel2", "snap", "ts"],
            edits: ["s['version'] = 2", "s['roles']['targets']['threshold'] = 1"], out: "2.root.json")
        let forged = try device.update()
        #expect(forged.status == 3 && Self.code(forged) == "threshold-not-met", "\(forged.stdoutText)")
        #expect(device.trustedVersion("root") == 1)
        // One root key of two: signet repo keeps it staged; copied into place, devices refuse it.
        try FileManager.default.removeItem(atPath: fleet.repo + "/metadata/2.root.json")
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "targets", "--threshold", "1"]))
        let one = try fleet.check(fleet.sign("root", "root1"))
        #expect(try one.json()["published"] as? Bool == false)
        try FileManager.default.copyItem(atPath: fleet.repo + "/staging/root.json", toPath: fleet.repo + "/metadata/2.root.json")
        let half = try device.update()
        #expect(half.status == 3 && Self.code(half) == "threshold-not-met", "\(half.stdoutText)")
        #expect(device.trustedVersion("root") == 1)
    }

    @Test("after rotations that replace a stolen targets key, a device offline through all of them refuses the old key and accepts the new")
    func rotationReachesOfflineDevice() throws {
        let fleet = try Fleet("rotation")
        try fleet.release(1)
        let device = try fleet.device()
        try fleet.check(device.update())
        // Which of the two ids is rel1's: the one `repo sign` with rel1 records on a staged file.
        try fleet.check(CLI.run(["repo", "add", fleet.repo, try fleet.pack(2), "--channel", "stable"]))
        try fleet.check(fleet.sign("targets", "rel1"))
        let staged = try fleet.check(CLI.run(["repo", "status", fleet.repo, "--json"])).json()
        let stolenID = try #require(((staged["staged"] as? [[String: Any]])?.first?["signed_by"] as? [String])?.first)
        try FileManager.default.removeItem(atPath: fleet.repo + "/staging/targets.json")
        // Rotation 1: rel1 out, rel3 in. Rotation 2: threshold 1 of {rel2, rel3}.
        // The first rotation is held until targets is signed again by the new set (issue 49).
        let rotated = try fleet.check(
            CLI.run(["repo", "rotate", fleet.repo, "--role", "targets", "--remove", String(stolenID.prefix(10)), "--add", fleet.pub("rel3")]))
        // Release 1 was packed with rel1: said, since new devices would refuse it (issue 49),
        // with the re-signature that keeps it installable (issue 61).
        #expect(
            rotated.stderr.contains("app-1.zip") && rotated.stderr.contains("is signed by no targets key root v2 names")
                && rotated.stderr.contains("signet repo resign"), "\(rotated.stderr)")
        try fleet.signRoot()
        for key in ["rel2", "rel3"] { try fleet.check(fleet.sign("targets", key)) }
        try fleet.refresh()
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "targets", "--threshold", "1"]))
        try fleet.signRoot()
        // The thief signs a release with rel1 (the old key) and publishes it with the online
        // keys, with a tool of their own (signet repo refresh names only targets the root accepts).
        let targets = fleet.trustedTargetsVersion()
        try fleet.resign("1.targets.json", keys: ["rel1"], root: "1.root.json", edits: ["s['version'] = \(targets + 1)"], out: "\(targets + 1).targets.json")
        let snapshot = try fleet.publishAsThief(targets: targets + 1)
        let refused = try device.update()
        #expect(refused.status == 3 && Self.code(refused) == "threshold-not-met", "\(refused.stdoutText)")
        #expect(device.trustedVersion("root") == 3, "the device walked both rotations")
        #expect(device.installed() == "release 1\n")
        // The publisher's next release, signed by the new key, reaches it.
        try FileManager.default.removeItem(atPath: fleet.repo + "/metadata/\(targets + 1).targets.json")
        try FileManager.default.removeItem(atPath: fleet.repo + "/metadata/\(snapshot).snapshot.json")
        try fleet.release(3, signers: ["rel3"], packKey: "rel3")
        let accepted = try device.update()
        #expect(accepted.status == 0, "\(accepted.stderr)")
        #expect(device.installed() == "release 3\n")
        // A package signed by the revoked key is refused by the publisher's own tool.
        let revoked = try CLI.run(["repo", "add", fleet.repo, try fleet.pack(4, key: "rel1"), "--channel", "stable", "--json"])
        #expect(revoked.status == 3 && Self.code(revoked) == "untrusted-signer", "\(revoked.stdoutText)")
    }

    @Test("a stolen timestamp key: a rollback is refused; freezing works only until the snapshot expires")
    func stolenTimestampKey() throws {
        let fleet = try Fleet("stolen-timestamp")
        try fleet.release(1)
        try fleet.release(2)
        let device = try fleet.device()
        try fleet.check(device.update())
        // Rollback: a newer timestamp naming the older snapshot.
        try fleet.resign("timestamp.json", keys: ["ts"], edits: ["s['version'] += 1", "s['meta']['snapshot.json'] = {'version': 1}"])
        let rollback = try device.update()
        #expect(rollback.status == 1 && Self.code(rollback) == "rollback", "\(rollback.stdoutText)")
        // Freeze: fresh timestamps naming today's snapshot are accepted until it expires (7
        // days): on the device's clock a week and a day later, no longer.
        try fleet.resign(
            "timestamp.json", keys: ["ts"],
            edits: [
                "s['version'] += 1", "s['meta']['snapshot.json'] = {'version': 2}",
                "s['expires'] = '2099-01-01T00:00:00Z'"
            ])
        let frozen = try device.update()
        #expect(frozen.status == 0, "\(frozen.stdoutText)")
        let frozenLater = try device.update(later: "+6d")
        #expect(frozenLater.status == 0, "still within the snapshot's week: \(frozenLater.stdoutText)")
        try fleet.resign("timestamp.json", keys: ["ts"], edits: ["s['version'] += 1", "s['expires'] = '2099-01-01T00:00:00Z'"])
        let stale = try device.update(later: "+8d")
        #expect(stale.status == 1 && Self.code(stale) == "expired-metadata", "\(stale.stdoutText)")
    }

    @Test("rollback of each role: an older snapshot, a snapshot naming an older targets version, an older targets file under a newer name")
    func rollbackOfEachRole() throws {
        let fleet = try Fleet("rollback")
        try fleet.release(1)
        try fleet.release(2)
        let device = try fleet.device()
        try fleet.check(device.update())
        #expect(device.trustedVersion("snapshot") == 2 && device.trustedVersion("targets") == 2)
        let timestamp = try Data(contentsOf: URL(fileURLWithPath: fleet.repo + "/metadata/timestamp.json"))
        // Thief with both online keys: a new timestamp naming snapshot 3, which lists targets 1.
        try fleet.resign("2.snapshot.json", keys: ["snap"], edits: ["s['version'] = 3", "s['meta']['targets.json'] = {'version': 1}"], out: "3.snapshot.json")
        try fleet.resign("timestamp.json", keys: ["ts"], edits: ["s['version'] += 1", "s['meta']['snapshot.json'] = {'version': 3}"])
        let olderTargets = try device.update()
        #expect(olderTargets.status == 1 && Self.code(olderTargets) == "rollback", "\(olderTargets.stdoutText)")
        // The snapshot's version itself going back (timestamp naming snapshot 1).
        try timestamp.write(to: URL(fileURLWithPath: fleet.repo + "/metadata/timestamp.json"))
        try fleet.resign("timestamp.json", keys: ["ts"], edits: ["s['version'] += 2", "s['meta']['snapshot.json'] = {'version': 1}"])
        let olderSnapshot = try device.update()
        #expect(olderSnapshot.status == 1 && Self.code(olderSnapshot) == "rollback", "\(olderSnapshot.stdoutText)")
        // An old targets file served where the snapshot names version 2 (a fresh device, so
        // nothing is stored): its version is not the one the snapshot binds.
        try timestamp.write(to: URL(fileURLWithPath: fleet.repo + "/metadata/timestamp.json"))
        try FileManager.default.removeItem(atPath: fleet.repo + "/metadata/3.snapshot.json")
        try fleet.resign("2.snapshot.json", keys: ["snap"], edits: ["s['meta']['targets.json'] = {'version': 2}"])
        try fleet.resign("timestamp.json", keys: ["ts"], edits: ["s['version'] += 3", "s['meta']['snapshot.json'] = {'version': 2}"])
        try FileManager.default.removeItem(atPath: fleet.repo + "/metadata/2.targets.json")
        try FileManager.default.copyItem(atPath: fleet.repo + "/metadata/1.targets.json", toPath: fleet.repo + "/metadata/2.targets.json")
        let fresh = try fleet.device("fresh")
        let oldTargets = try fresh.update()
        #expect(oldTargets.status == 1 && Self.code(oldTargets) == "metadata-mismatch", "\(oldTargets.stdoutText)")
        #expect(fresh.installed() == nil && device.installed() == "release 2\n")
    }

    @Test("a stolen snapshot key cannot mix and match: a snapshot the timestamp does not bind is refused")
    func stolenSnapshotKey() throws {
        let fleet = try Fleet("stolen-snapshot")
        try fleet.release(1)
        try fleet.release(2)
        // The thief replaces the current snapshot with one naming the old targets version.
        try fleet.resign("2.snapshot.json", keys: ["snap"], edits: ["s['meta']['targets.json'] = {'version': 1}"])
        let device = try fleet.device()
        let result = try device.update()
        #expect(result.status == 1 && Self.code(result) == "metadata-mismatch", "\(result.stdoutText)")
        #expect(device.installed() == nil)
    }

    @Test("TUF attacks: endless data (timestamp beyond 16 KiB), malicious mirror (a package that is not the target, read by ranges or whole)")
    func attacks() throws {
        let fleet = try Fleet("attacks")
        try fleet.release(1)
        // Endless data: a timestamp far beyond 16 KiB.
        let saved = try Data(contentsOf: URL(fileURLWithPath: fleet.repo + "/metadata/timestamp.json"))
        try fleet.resign("timestamp.json", keys: ["ts"], edits: ["s['padding'] = 'x' * 40000"])
        let device = try fleet.device()
        let endless = try device.update()
        #expect(endless.status == 4 && Self.code(endless) == "download-too-large", "\(endless.stdoutText)")
        try saved.write(to: URL(fileURLWithPath: fleet.repo + "/metadata/timestamp.json"))
        // Malicious mirror: the package file is replaced by another signed package.
        let targets = try FileManager.default.contentsOfDirectory(atPath: fleet.repo + "/targets").filter { $0.hasSuffix(".app-1.zip") }
        let served = fleet.repo + "/targets/" + (targets.first ?? "")
        try FileManager.default.removeItem(atPath: served)
        try FileManager.default.copyItem(atPath: try fleet.pack(1, text: "other content\n"), toPath: served)
        let mirror = try device.update()
        #expect(mirror.status == 1 && Self.code(mirror) == "index-mismatch", "\(mirror.stdoutText)")
        #expect(device.installed() == nil)
        let whole = try device.update(["--full-download"])
        #expect(whole.status == 1 && Self.code(whole) == "index-mismatch", "\(whole.stdoutText)")
        #expect(device.installed() == nil)
    }

    @Test("indefinite freeze: a timestamp the cron job stopped renewing expires, and devices say so")
    func freeze() throws {
        let fleet = try Fleet("freeze")
        try fleet.release(1)
        let device = try fleet.device()
        // Two days on (the timestamp lives one), with no refresh since.
        let expired = try device.update(later: "+2d")
        #expect(expired.status == 1 && Self.code(expired) == "expired-metadata", "\(expired.stdoutText)")
        #expect(device.installed() == nil)
    }

    @Test("slow retrieval: a server that trickles is given up on at --max-time")
    func slowRetrieval() throws {
        let script = pythonScript("silent_listener.py")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        // SIGKILL: the test runner blocks SIGTERM, and python3 inherits that.
        ExitCleanup.stopAtExit(process.processIdentifier, signal: SIGKILL)
        defer {
            ExitCleanup.forget(process.processIdentifier)
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        let line = String(decoding: out.fileHandleForReading.availableData, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let fleet = try Fleet("slow")
        let device = try fleet.device()
        let started = Date()
        let result = try CLI.run([
            "tuf", "refresh", "--metadata-dir", device.metadata, "--metadata-url", "http://127.0.0.1:\(line)/metadata/",
            "--allow-http", "--max-time", "3", "--json"
        ])
        #expect(result.status == 5 && Self.code(result) == "network-error", "\(result.stdoutText)")
        #expect(Date().timeIntervalSince(started) < 15)
    }

    @Test("python-tuf's repository (RSA, ECDSA and Ed25519 keys, a delegation) is consumed by signet update and signet tuf download")
    func pythonRepositoryToSignet() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        let repo = server.www + "/pyrepo"
        guard try Self.python(["keys", repo + "/keys"]).status == 0 else { throw SupportError("keys") }
        let tree = work.file("tree")
        try FileManager.default.createDirectory(atPath: tree, withIntermediateDirectories: true)
        try Data("from python-tuf\n".utf8).write(to: URL(fileURLWithPath: tree + "/a.txt"))
        let package = work.file("app-5.zip")
        let packed = try CLI.run(["pack", tree, "--key", repo + "/keys/apps.pem", "--name", "app", "--version", "5.0", "--sequence", "5", "--out", package])
        #expect(packed.status == 0, "\(packed.stderr)")
        let made = try Self.python(["pyrepo", repo, package, "stable", "app", "5.0", "5"])
        try #require(made.status == 0, "\(made.stderr)")
        let metadata = work.file("metadata")
        #expect(try CLI.run(["tuf", "init", "--metadata-dir", metadata, repo + "/metadata/1.root.json"]).status == 0)
        let update = try CLI.run([
            "update", "--repository", server.url("pyrepo/metadata/"), "--tuf-metadata", metadata, "--channel", "stable",
            "--dest", work.file("app"), "--tls-ca", server.root, "--json"
        ])
        #expect(update.status == 0, "\(update.stderr)")
        #expect(try update.json()["role"] as? String == "apps")
        #expect((try? String(contentsOfFile: work.file("app/a.txt"), encoding: .utf8)) == "from python-tuf\n")
        let download = try CLI.run([
            "tuf", "download", "--metadata-dir", metadata, "--metadata-url", server.url("pyrepo/metadata/"),
            "--target-name", "readme.txt", "--target-dir", work.path, "--tls-ca", server.root, "--json"
        ])
        #expect(download.status == 0, "\(download.stderr)")
        #expect((try? String(contentsOfFile: work.file("readme.txt"), encoding: .utf8)) == "read me\n")
    }

    @Test("a repository made by signet repo is refreshed by python-tuf's ngclient, which downloads and verifies the package")
    func signetRepositoryToPython() throws {
        let fleet = try Fleet("to-python")
        try fleet.release(1)
        let out = fleet.work.file("python")
        let result = try Self.python(
            [
                "ngclient", fleet.metadataURL, fleet.server.url(fleet.name + "/targets/"), fleet.repo + "/metadata/1.root.json",
                "app-1.zip", out
            ], environment: ["SSL_CERT_FILE": fleet.server.root])
        #expect(result.status == 0, "\(result.stderr)")
        let report = try result.json()
        let custom = (report["custom"] as? [String: Any])?["signet"] as? [String: Any]
        #expect(custom?["sequence"] as? Int == 1 && custom?["channels"] as? [String] == ["stable"])
        let downloaded = try Data(contentsOf: URL(fileURLWithPath: report["path"] as? String ?? ""))
        #expect(downloaded == (try Data(contentsOf: URL(fileURLWithPath: fleet.work.file("app-1.zip")))))
    }

    @Test("README's TUF walk-through runs as written: a root key on SoftHSM2, two-person releases, the cron refresh, a device, a stolen release key replaced")
    func readmeRepository() throws {
        let server = try Self.shared.get()
        let work = try TemporaryDirectory()
        let d = work.path
        try Data("directories.tokendir = \(d)/tokens\nobjectstore.backend = file\nlog.level = ERROR\n".utf8).write(
            to: URL(fileURLWithPath: d + "/softhsm2.conf"))
        let environment: [String: String?] = [
            "PATH": URL(fileURLWithPath: CLI.binary).deletingLastPathComponent().path + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
            "SIGNET_PASSPHRASE": "tuf walk-through",
            "SOFTHSM2_CONF": d + "/softhsm2.conf"
        ]
        let setup = """
            set -e
            mkdir -p dist pki tokens
            echo 'app 1.4.2' > dist/version.txt
            echo 87654321 > so-pin.txt && echo 1234 > pin.txt && chmod 600 so-pin.txt pin.txt
            cp '\(server.root)' pki/root.pem
            """
        let prepared = try run("bash", ["-c", setup], environment: environment, directory: d)
        try #require(prepared.status == 0, "\(prepared.stderr)")
        let www = server.www + "/readme-tuf"
        func moved(_ block: String) -> String {
            block.replacingOccurrences(of: "https://updates.example.com/app/", with: server.url("readme-tuf/"))
                .replacingOccurrences(of: "/srv/www/app", with: www)
                .replacingOccurrences(of: "/etc/", with: d + "/etc/")
                .replacingOccurrences(of: "/opt/", with: d + "/opt/")
                .replacingOccurrences(of: "/var/lib/", with: d + "/var/lib/")
        }
        let ran = try run("bash", ["-euo", "pipefail", "-c", moved(try UpdateCLITests.readmeBlock("tuf-repository"))], environment: environment, directory: d)
        #expect(ran.status == 0, "\(ran.stderr)\n\(ran.stdoutText)")
        let lines = ran.stdoutText.split(separator: "\n").map(String.init)
        #expect(
            lines.contains { $0.hasPrefix("update available") } && lines.contains { $0.hasPrefix("updated") } && lines.contains { $0.hasPrefix("up to date") },
            "\(ran.stdoutText)")
        #expect((try? String(contentsOfFile: d + "/opt/app/version.txt", encoding: .utf8)) == "app 1.4.2\n")

        try Data("app 1.5.0\n".utf8).write(to: URL(fileURLWithPath: d + "/dist/version.txt"))
        let rotated = try run("bash", ["-euo", "pipefail", "-c", moved(try UpdateCLITests.readmeBlock("tuf-rotation"))], environment: environment, directory: d)
        #expect(rotated.status == 0, "\(rotated.stderr)\n\(rotated.stdoutText)")
        #expect((try? String(contentsOfFile: d + "/opt/app/version.txt", encoding: .utf8)) == "app 1.5.0\n")
        let root = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: d + "/var/lib/signet/tuf/app/root.json"))) as? [String: Any]
        #expect((root?["signed"] as? [String: Any])?["version"] as? Int == 2)
        // Bob's stolen key no longer counts towards a release.
        let staged =
            "signet pack dist --key release-alice/private_key.pem --passphrase-env SIGNET_PASSPHRASE --name app --version 1.6.0 --sequence 160 --out app-1.6.0.zip && signet repo add \(www) app-1.6.0.zip --channel stable"
        #expect(try run("bash", ["-euo", "pipefail", "-c", staged], environment: environment, directory: d).status == 0)
        let digest = try CLI.run(["repo", "status", www, "--staged-digest", "targets"]).stdoutText.trimmingCharacters(in: .whitespacesAndNewlines)
        let bob = try CLI.run(
            [
                "repo", "sign", www, "--role", "targets", "--key", d + "/release-bob/private_key.pem", "--passphrase-env", "SIGNET_PASSPHRASE",
                "--digest", digest, "--json"
            ],
            environment: environment)
        #expect(bob.status == 3 && Self.code(bob) == "untrusted-signer", "\(bob.stdoutText)")
        try FileManager.default.removeItem(atPath: www + "/staging/targets.json")

        // Issue 49: renewal without a release, the online key and a root key replaced; the
        // device follows every root and nothing needs attention.
        let kept = try run("bash", ["-euo", "pipefail", "-c", moved(try UpdateCLITests.readmeBlock("tuf-keeping"))], environment: environment, directory: d)
        #expect(kept.status == 0, "\(kept.stderr)\n\(kept.stdoutText)")
        #expect(kept.stdoutText.contains("up to date") && !kept.stdoutText.contains("NEEDS ATTENTION"), "\(kept.stdoutText)")
        let after = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: d + "/var/lib/signet/tuf/app/root.json"))) as? [String: Any]
        #expect((after?["signed"] as? [String: Any])?["version"] as? Int == 4)
        #expect(FileManager.default.fileExists(atPath: www + "/metadata/4.root.json") && !FileManager.default.fileExists(atPath: www + "/staging/root.json"))
    }
}
