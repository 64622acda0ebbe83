import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import SignetTestSupport

/// Issue 49, points 1, 2 and 4: rotations that re-sign what they must, expiry that warns, and
/// one key id.
@Suite("Keeping a repository servable (issue 49)")
struct RepositoryKeepingCLITests {
    typealias Fleet = TUFCLITests.Fleet

    /// signet under a clock `offset` ahead (libfaketime's `+100d`, see `runUnderFakedClock`).
    static func later(_ offset: String, _ arguments: [String]) throws -> ProcessResult {
        try runUnderFakedClock(offset, CLI.binary, arguments)
    }

    static func alerts(_ result: ProcessResult) throws -> [(role: String, kind: String)] {
        ((try result.json()["alerts"] as? [[String: Any]]) ?? []).map { ($0["role"] as? String ?? "", $0["kind"] as? String ?? "") }
    }

    @Test(
        "rotating the targets, snapshot, timestamp and root keys of a repository a device follows: after every documented step the device still updates, and the next release installs"
    )
    func rotateEachRole() throws {
        let fleet = try Fleet("keeping-rotate")
        try fleet.release(1)
        let device = try fleet.device()
        func deviceUpdates(_ step: String) throws {
            let result = try device.update()
            #expect(result.status == 0, "after \(step): \(result.stdoutText) \(result.stderr)")
        }
        try deviceUpdates("the first release")
        func status() throws -> ProcessResult { try fleet.check(CLI.run(["repo", "status", fleet.repo, "--json"])) }

        // Targets: rel2 leaves, rel3 joins (2 of 2). Rotate re-stages targets for the new set.
        let rotated = try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "targets", "--remove", fleet.pub("rel2"), "--add", fleet.pub("rel3")]))
        #expect(rotated.stdoutText.contains("targets is staged again as v2") && rotated.stdoutText.contains("--role targets"), "\(rotated.stdoutText)")
        #expect(!rotated.stderr.contains("warning"), "release 1 is signed by rel1, which stays: \(rotated.stderr)")
        try deviceUpdates("rotate")
        try fleet.signRoot()
        #expect(!FileManager.default.fileExists(atPath: fleet.repo + "/metadata/2.root.json"), "the root is held, not published")
        #expect(try Self.alerts(status()).contains { $0 == ("root", "held") })
        try deviceUpdates("the root signatures")
        let rel3 = try fleet.check(fleet.sign("targets", "rel3"))
        #expect(try rel3.json()["published"] as? Bool == false)
        try deviceUpdates("the first targets signature")
        try fleet.check(fleet.sign("targets", "rel1"))
        try deviceUpdates("the second targets signature")
        let refreshed = try fleet.check(CLI.run(["repo", "refresh", fleet.repo, "--snapshot-key", fleet.priv("snap"), "--timestamp-key", fleet.priv("ts")]))
        #expect(refreshed.stdoutText.contains("root v2 (held until now)"), "\(refreshed.stdoutText)")
        try deviceUpdates("the refresh that published root v2")
        #expect(device.trustedVersion("root") == 2)
        #expect(try Self.alerts(status()).isEmpty)
        try fleet.release(2, signers: ["rel1", "rel3"])
        try deviceUpdates("release 2")
        #expect(device.installed() == "release 2\n")

        // Snapshot: a spare key replaces snap. The cron job with the old key keeps devices
        // served (and says what the root waits for); given the new key, it publishes the root.
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "snapshot", "--remove", fleet.pub("snap"), "--add", fleet.pub("evil")]))
        try fleet.signRoot()
        try deviceUpdates("the snapshot rotation's root signatures")
        let oldCron = try fleet.check(CLI.run(["repo", "refresh", fleet.repo, "--snapshot-key", fleet.priv("snap"), "--timestamp-key", fleet.priv("ts")]))
        #expect(oldCron.stderr.contains("root v3 is signed and held") && oldCron.stderr.contains("snapshot"), "\(oldCron.stderr)")
        try deviceUpdates("a refresh with the old snapshot key")
        try fleet.check(CLI.run(["repo", "refresh", fleet.repo, "--snapshot-key", fleet.priv("evil"), "--timestamp-key", fleet.priv("ts")]))
        try deviceUpdates("the refresh with the new snapshot key")
        #expect(device.trustedVersion("root") == 3)

        // Timestamp: the freed rel2 becomes the timestamp key.
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "timestamp", "--remove", fleet.pub("ts"), "--add", fleet.pub("rel2")]))
        try fleet.signRoot()
        try deviceUpdates("the timestamp rotation's root signatures")
        try fleet.check(CLI.run(["repo", "refresh", fleet.repo, "--snapshot-key", fleet.priv("evil"), "--timestamp-key", fleet.priv("rel2")]))
        try deviceUpdates("the refresh with the new timestamp key")
        #expect(device.trustedVersion("root") == 4)

        // Root: 1 of 2 from now on; nothing devices read changes, so it is published at once.
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "root", "--threshold", "1"]))
        try fleet.signRoot()
        #expect(FileManager.default.fileExists(atPath: fleet.repo + "/metadata/5.root.json"))
        try deviceUpdates("the root rotation")
        try fleet.check(CLI.run(["repo", "add", fleet.repo, try fleet.pack(3), "--channel", "stable"]))
        for key in ["rel1", "rel3"] { try fleet.check(fleet.sign("targets", key)) }
        try fleet.check(CLI.run(["repo", "refresh", fleet.repo, "--snapshot-key", fleet.priv("evil"), "--timestamp-key", fleet.priv("rel2")]))
        try deviceUpdates("release 3")
        #expect(device.installed() == "release 3\n")
        #expect(device.trustedVersion("root") == 5)
    }

    @Test("a repository a rotation already broke is flagged by repo status, and renew re-stages targets for the new keys")
    func brokenRepositoryFlagged() throws {
        let fleet = try Fleet("keeping-broken")
        try fleet.release(1)
        // What older versions did: the new root published at once, targets signed by the old set.
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "targets", "--remove", fleet.pub("rel2"), "--add", fleet.pub("rel3")]))
        try fleet.signRoot()
        try FileManager.default.moveItem(atPath: fleet.repo + "/staging/root.json", toPath: fleet.repo + "/metadata/2.root.json")
        try FileManager.default.removeItem(atPath: fleet.repo + "/staging/targets.json")
        let text = try fleet.check(CLI.run(["repo", "status", fleet.repo])).stdoutText
        #expect(text.contains("NEEDS ATTENTION (targets, threshold)") && text.contains("signet repo renew"), "\(text)")
        try fleet.check(CLI.run(["repo", "renew", fleet.repo, "--role", "targets"]))
        for key in ["rel1", "rel3"] { try fleet.check(fleet.sign("targets", key)) }
        try fleet.refresh()
        #expect(try Self.alerts(fleet.check(CLI.run(["repo", "status", fleet.repo, "--json"]))).isEmpty)
        let device = try fleet.device()
        let updated = try device.update()
        #expect(updated.status == 0 && device.installed() == "release 1\n", "\(updated.stdoutText)")
    }

    @Test("expiry under a faked clock: status flags targets and root before and after they expire; refresh exits 1 naming repo renew; renewing clears it")
    func expiryWarns() throws {
        let p = try UpdateCLITests.Publisher("keeping-expiry")
        try p.release(1)
        let refresh = [
            "repo", "refresh", p.repo, "--snapshot-key", p.work.privatePEM, "--timestamp-key", p.work.privatePEM, "--passphrase-file", p.work.passFile
        ]
        #expect(try Self.alerts(CLI.run(["repo", "status", p.repo, "--json"])).isEmpty)

        // 80 days on: targets (90 days) is within the 14-day window; the cron job fails loudly
        // after renewing what it can.
        // (Snapshot and timestamp, which no refresh renewed for 80 days, are flagged expired.)
        let soon = try Self.alerts(Self.later("+80d", ["repo", "status", p.repo, "--json"]))
        #expect(
            soon.contains { $0 == ("targets", "expiring") } && soon.contains { $0 == ("timestamp", "expired") } && !soon.contains { $0.role == "root" },
            "\(soon)")
        let before = try String(contentsOfFile: p.repo + "/metadata/timestamp.json", encoding: .utf8)
        let cron = try Self.later("+80d", refresh)
        #expect(cron.status == 1 && cron.stderr.contains("targets") && cron.stderr.contains("signet repo renew"), "\(cron.stderr)")
        #expect(try String(contentsOfFile: p.repo + "/metadata/timestamp.json", encoding: .utf8) != before, "the timestamp is renewed all the same")
        #expect(try Self.later("+80d", refresh + ["--warn-within", "7d"]).status == 0)

        // 100 days on: expired, and said so in text.
        let expired = try Self.later("+100d", ["repo", "status", p.repo]).stdoutText
        #expect(expired.contains("NEEDS ATTENTION (targets, expired)") && expired.contains("EXPIRED"), "\(expired)")
        #expect(try Self.later("+100d", refresh).status == 1)
        let renewed = try Self.later("+100d", ["repo", "renew", p.repo, "--role", "targets"] + p.key)
        #expect(renewed.status == 0 && renewed.stdoutText.contains("published"), "\(renewed.stderr)")
        #expect(try Self.later("+100d", refresh).status == 0)
        #expect(try Self.alerts(Self.later("+100d", ["repo", "status", p.repo, "--json"])).isEmpty)

        // 355 days on: root (a year) within the window as well as targets; both renewed.
        let late = try Self.alerts(Self.later("+355d", ["repo", "status", p.repo, "--json"]))
        #expect(late.contains { $0 == ("root", "expiring") } && late.contains { $0 == ("targets", "expired") }, "\(late)")
        let rootCron = try Self.later("+355d", refresh)
        #expect(rootCron.status == 1 && rootCron.stderr.contains("--role root"), "\(rootCron.stderr)")
        for role in ["root", "targets"] {
            let result = try Self.later("+355d", ["repo", "renew", p.repo, "--role", role] + p.key)
            #expect(result.status == 0, "\(role): \(result.stderr)")
        }
        #expect(try Self.later("+355d", refresh).status == 0)
        // A staged renewal is not staged twice; snapshot and timestamp are the refresh's.
        try p.check(CLI.run(["repo", "renew", p.repo, "--role", "targets"]))
        let twice = try CLI.run(["repo", "renew", p.repo, "--role", "targets"])
        #expect(twice.status == 2 && twice.stderr.contains("already holds targets"), "\(twice.stderr)")
        #expect(try CLI.run(["repo", "renew", p.repo, "--role", "timestamp"]).status == 2)
    }

    @Test(
        "issue 51 point 4: a release packed by another key of the targets role shares the unchanged files; reverify names each file's key; a key rotated out stops counting and its files are copied at the next update"
    )
    func sharedAcrossKeys() throws {
        let fleet = try Fleet("keeping-shared", targetsThreshold: 1)
        try fleet.release(1, signers: ["rel1"], packKey: "rel1")
        let device = try fleet.device()
        try fleet.check(device.update())
        let keyID = { (key: String) throws -> String in try fleet.check(CLI.run(["key", "show", fleet.pub(key), "--json"])).json()["key_id"] as? String ?? "" }
        let rel1 = try keyID("rel1"), rel2 = try keyID("rel2")
        func reverify() throws -> (status: Int32, files: [String: [String: Any]]) {
            let result = try CLI.run(["reverify", device.dest, "--tuf-metadata", device.metadata, "--json"])
            let trees = try result.json()["trees"] as? [[String: Any]] ?? []
            let files = (trees.first?["files"] as? [[String: Any]] ?? []).reduce(into: [String: [String: Any]]()) { $0[$1["path"] as? String ?? ""] = $1 }
            return (result.status, files)
        }
        let previous = device.folder + "/.app.signet-previous"

        // Release 2 packed by rel2: b.txt (unchanged) is the same inode as in release 1's tree.
        try fleet.release(2, signers: ["rel2"], packKey: "rel2")
        let text = try CLI.run([
            "update", "--repository", fleet.metadataURL, "--tuf-metadata", device.metadata, "--channel", "stable", "--dest", device.dest,
            "--tls-ca", fleet.server.root
        ])
        #expect(
            text.status == 0 && text.stdoutText.contains("unchanged files: 1 shared with the replaced tree") && !text.stdoutText.contains("copied"),
            "\(text.stdoutText)")
        #expect(
            RepairCLITests.inode(device.dest + "/b.txt") != nil && RepairCLITests.inode(device.dest + "/b.txt") == RepairCLITests.inode(previous + "/b.txt"))
        var checked = try reverify()
        #expect(checked.status == 0, "\(checked.files)")
        #expect(checked.files["b.txt"]?["key_id"] as? String == rel1 && checked.files["b.txt"]?["verdict"] as? String == "ok", "\(checked.files)")
        #expect((checked.files["b.txt"]?["detail"] as? String)?.contains("the tree's record holds") == true, "\(checked.files)")
        #expect(checked.files["a.txt"]?["key_id"] as? String == rel2, "\(checked.files)")
        // The attribute must verify: one that is by no trusted key is not taken for a peer's.
        try fleet.release(3, signers: ["rel1"], packKey: "rel1")
        let back = try fleet.check(device.update()).json()
        #expect(back["files_shared"] as? Int == 1 && back["files_copied"] as? Int == 0, "\(back)")

        // rel1 leaves the targets role: its signature on b.txt no longer vouches for anything.
        try fleet.check(CLI.run(["repo", "rotate", fleet.repo, "--role", "targets", "--remove", fleet.pub("rel1"), "--add", fleet.pub("rel3")]))
        try fleet.signRoot()
        try fleet.check(fleet.sign("targets", "rel2"))
        try fleet.refresh()
        try fleet.release(4, signers: ["rel2"], packKey: "rel2")
        let rotated = try fleet.check(device.update()).json()
        #expect(rotated["files_shared"] as? Int == 0 && rotated["files_copied"] as? Int == 1, "b.txt is written again with rel2's signature: \(rotated)")
        checked = try reverify()
        #expect(checked.status == 0 && checked.files["b.txt"]?["key_id"] as? String == rel2, "\(checked.files)")

        // Outside TUF: any key the policy accepts, and only while it accepts it.
        let dest = fleet.work.file("plain/app")
        let keys = ["--pubkey", fleet.pub("rel1"), "--pubkey", fleet.pub("rel2"), "--json"]
        try fleet.check(CLI.run(["unpack", try fleet.pack(5, key: "rel1"), "--dest", dest] + keys))
        let plain = try fleet.check(CLI.run(["unpack", try fleet.pack(6, key: "rel2"), "--dest", dest] + keys)).json()
        #expect(plain["files_shared"] as? Int == 1, "\(plain)")
        #expect(try CLI.run(["reverify", dest] + keys).status == 0)
        // rel1 no longer trusted: b.txt's attribute cannot be checked; the tree's record (rel2)
        // vouches for it, and the report says so. An attribute damaged under rel2's own name
        // is still attributes-lost.
        let alone = try CLI.run(["reverify", dest, "--pubkey", fleet.pub("rel2"), "--json"])
        let aloneFiles = (try alone.json()["trees"] as? [[String: Any]])?.first?["files"] as? [[String: Any]] ?? []
        let b = aloneFiles.first { $0["path"] as? String == "b.txt" }
        #expect(
            alone.status == 0 && b?["signature"] as? String == "record" && (b?["detail"] as? String)?.contains("no longer accepts") == true,
            "\(alone.stdoutText)")
        #expect(try run("setfattr", ["-n", "user.signet.sig", "-v", "0x" + String(repeating: "07", count: 256), dest + "/a.txt"]).status == 0)
        let damaged = try CLI.run(["reverify", dest, "--pubkey", fleet.pub("rel2")])
        #expect(damaged.status == 1 && damaged.stdoutText.contains("attributes-lost a.txt"), "\(damaged.stdoutText)")
    }

    @Test(
        "one key id: repo status shows the Signet id key show prints beside the TUF id; rotate removes a key by its Signet id; a rotation that changes nothing is refused"
    )
    func oneKeyID() throws {
        let fleet = try Fleet("keeping-ids", targetsThreshold: 1)
        let shown = try fleet.check(CLI.run(["key", "show", fleet.pub("rel2"), "--json"])).json()
        let signetID = try #require(shown["key_id"] as? String)
        let text = try fleet.check(CLI.run(["repo", "status", fleet.repo])).stdoutText
        #expect(text.contains(String(signetID.prefix(16))), "\(text)")
        let roles = try fleet.check(CLI.run(["repo", "status", fleet.repo, "--json"])).json()["roles"] as? [[String: Any]] ?? []
        let targets = roles.first { $0["name"] as? String == "targets" }
        #expect((targets?["signet_keyids"] as? [String])?.contains(String(signetID.prefix(16))) == true, "\(String(describing: targets))")
        let removed = try CLI.run(["repo", "rotate", fleet.repo, "--role", "targets", "--remove", String(signetID.prefix(12))])
        #expect(removed.status == 0, "\(removed.stderr)")
        let review = try fleet.check(CLI.run(["repo", "status", fleet.repo])).stdoutText
        #expect(
            review.contains("role targets: 1 of") && review.contains("(published: 1 of ") && review.contains(String(signetID.prefix(16)) + " (TUF "),
            "\(review)")
        // Signing shows the signer by its Signet id too.
        let rootID = try #require(try fleet.check(CLI.run(["key", "show", fleet.pub("root1"), "--json"])).json()["key_id"] as? String)
        let signed = try CLI.run(["repo", "sign", fleet.repo, "--role", "root", "--key", fleet.priv("root1"), "--digest", try fleet.digest("root")])
        #expect(signed.status == 0 && signed.stdoutText.contains("signed by key " + String(rootID.prefix(16))), "\(signed.stdoutText)")
        // Point 15: the same threshold again changes nothing, and says how to renew instead.
        try FileManager.default.removeItem(atPath: fleet.repo + "/staging/root.json")
        let noop = try CLI.run(["repo", "rotate", fleet.repo, "--role", "root", "--threshold", "2"])
        #expect(noop.status == 2 && noop.stderr.contains("nothing changes") && noop.stderr.contains("repo renew"), "\(noop.stderr)")
        #expect(!FileManager.default.fileExists(atPath: fleet.repo + "/staging/root.json"))
    }
}
