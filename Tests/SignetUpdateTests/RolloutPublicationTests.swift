import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
@testable import SignetTUF
@testable import SignetPublish
import SignetTestSupport
import SignetCryptoTestSupport
import SignetPackageTestSupport

/// FORMAT.md §7, "Rollouts" (issue 62): a plan whose start is not given — a resume, a new plan
/// without `--start` — counts from when devices can see it (the snapshot that first names the
/// targets version carrying it), not from when it was staged, so the hours the key holders take
/// to sign never open a share at once. A repository on nginx, devices with an injected clock.
@Suite("Rollouts count from their publication")
struct RolloutPublicationTests {
    typealias Site = ReleaseChoiceTests.Site

    static func after(_ base: Timestamp, hours: Double) -> Timestamp {
        Timestamp(secondsSinceEpoch: base.secondsSinceEpoch + Int64(hours * 3_600))
    }

    /// The published snapshot's `signet_published` for targets.json.
    static func published(_ site: Site) throws -> String? {
        let folder = site.server.www + "/" + site.path + "/metadata"
        let name = try #require(
            try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".snapshot.json") }
                .max { Int($0.split(separator: ".")[0])! < Int($1.split(separator: ".")[0])! })
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: folder + "/" + name))) as? [String: Any]
        let meta = (json?["signed"] as? [String: Any])?["meta"] as? [String: Any]
        return (meta?["targets.json"] as? [String: Any])?["signet_published"] as? String
    }

    /// Release 10 published for all, then 11 with the plan `1%@0h,100%@1h` from a minute ago,
    /// published then; returns that start.
    static func rollingOut(_ site: Site) throws -> Timestamp {
        let t0 = Timestamp(secondsSinceEpoch: Timestamp.now.secondsSinceEpoch - 60)
        try site.add(10)
        let (_, package) = try PackageFixture.package(site.work, sequence: 11, name: "assets-11.zip", extra: "release 11\n")
        _ = try site.repository.add(package: package, channels: ["stable"], rollout: try TUFRollout(plan: "1%@0h,100%@1h", start: t0), now: t0)
        try site.publish(now: t0)
        return t0
    }

    @Test(
        "1%@0h,100%@1h paused at once; the resume staged at +10 h is signed and published at +12 h: devices see 1% then, 100% an hour later; repo status shows the start devices count from; the next version fixes it"
    )
    func resumeCountsFromPublication() throws {
        let site = try Site("rollout-publication")
        let t0 = try Self.rollingOut(site)
        _ = try site.repository.changeRollout(of: "assets-11.zip", .pause, now: Self.after(t0, hours: 0.01))
        try site.publish(now: Self.after(t0, hours: 0.01))
        // Staged at +10 h; the second key holder signs, and the refresh publishes, at +12 h.
        let resumed = try site.repository.changeRollout(of: "assets-11.zip", .resume, now: Self.after(t0, hours: 10))
        #expect(resumed.rollout?.stagedAt == Self.after(t0, hours: 10))
        let published = Self.after(t0, hours: 12)
        try site.publish(now: published)
        #expect(try Self.published(site) == published.rfc3339)
        let id = RolloutTests.fleet[0]
        let (seen, folder) = try site.update(id, at: Self.after(t0, hours: 12.01), check: true)
        let choice = try #require(seen.choice)
        let plan = try #require(try site.listed(folder).first { $0.sequence == 11 }?.rollout)
        #expect(plan.stagedAt == nil, "a device counts the plan from the publication the snapshot states")
        // Paused at +0.01 h with 1% open; resumed from the publication: still 1% just after it.
        #expect(plan.openBuckets(at: Self.after(t0, hours: 12.01)) == 100, "\(TUFRollout.describe(plan))")
        #expect(plan.openBuckets(at: Self.after(t0, hours: 13.1)) == TUFRollout.bucketCount)
        #expect(choice.newest.rollout?.openBuckets(at: Self.after(t0, hours: 12.01)) == 100)
        // Every device decides from the same plan: the fleet at +12.01 h is about 1%.
        let choices = try ReleaseChoiceTests.fleetChoices(try site.listed(folder), at: Self.after(t0, hours: 12.01))
        let share = Double(choices.filter { $0 == 11 }.count) / 10
        #expect(share <= 3, "\(share)% of the fleet would install 11 right after the resume is published; the plan's first step is 1%")
        // The publisher sees the start devices count from.
        let status = try site.repository.status(now: Self.after(t0, hours: 12.01))
        let listed = try #require(status.packages.first { $0.sequence == 11 }?.rollout)
        #expect(listed.stagedAt == nil && listed.start == Self.after(t0, hours: 12 - 0.01), "\(TUFRollout.describe(listed))")
        // The next targets version carries the plan as devices count it, fixed: a later
        // publication never moves it.
        _ = try site.repository.changeRollout(of: "assets-11.zip", .halt, now: Self.after(t0, hours: 12.5))
        let review = try #require(try site.repository.review("targets", now: Self.after(t0, hours: 12.5)))
        let halted = try #require(review.targets.first { $0.staged?.path == "assets-11.zip" }?.staged?.package?.rollout)
        #expect(halted.state == .halted && halted.start == Self.after(t0, hours: 12 - 0.01))
    }

    @Test(
        "a new plan without a start counts from its publication; one whose given start is past warns the signer with the share it would open at once; a later refresh keeps the publication time"
    )
    func replanWithoutStart() throws {
        let site = try Site("replan-publication")
        let t0 = try Self.rollingOut(site)
        // A given start two hours past: the signer is told what it opens at once.
        _ = try site.repository.changeRollout(
            of: "assets-11.zip", .replace(try TUFRollout(plan: "5%@0h,50%@1h,100%@4h", start: t0)), now: Self.after(t0, hours: 2))
        let warned = try #require(try site.repository.review("targets", now: Self.after(t0, hours: 2)))
        #expect(warned.warnings.count == 1 && warned.warnings[0].contains("50%") && warned.warnings[0].contains("without a start"), "\(warned.warnings)")
        #expect(warned.lines.contains { $0.hasPrefix("  WARNING:") })
        // The same plan without a start, staged at +2 h and published at +5 h: no warning, and
        // devices see its first step at +5 h.
        let plan = try TUFRollout(plan: "5%@0h,50%@1h,100%@4h", start: Self.after(t0, hours: 2)).countingFromPublication(stagedAt: Self.after(t0, hours: 2))
        _ = try site.repository.changeRollout(of: "assets-11.zip", .replace(plan), now: Self.after(t0, hours: 2))
        #expect(try site.repository.review("targets", now: Self.after(t0, hours: 2))?.warnings == [])
        try site.publish(now: Self.after(t0, hours: 5))
        let (_, folder) = try site.update(RolloutTests.fleet[1], at: Self.after(t0, hours: 5.1), check: true)
        let seen = try #require(try site.listed(folder).first { $0.sequence == 11 }?.rollout)
        #expect(seen.start == Self.after(t0, hours: 5) && seen.openBuckets(at: Self.after(t0, hours: 5.1)) == 500, "\(TUFRollout.describe(seen))")
        // A refresh four days on makes a new snapshot for the same targets version: it keeps
        // the time the version was first published.
        let outcome = try site.repository.refresh(snapshotKeys: [site.key], timestampKeys: [site.key], now: Self.after(t0, hours: 100))
        #expect(outcome.newSnapshot)
        #expect(try Self.published(site) == Self.after(t0, hours: 5).rfc3339)
    }

    @Test("the snapshot's time can only hold a plan back: one stating a time before the staging changes nothing, one without the field counts from the staging")
    func snapshotBound() throws {
        let staged = Timestamp(secondsSinceEpoch: 1_800_000_000)
        let plan = try TUFRollout(plan: "1%@0h,100%@1h", start: staged).countingFromPublication(stagedAt: staged)
        #expect(plan.resolved(publishedAt: Timestamp(secondsSinceEpoch: staged.secondsSinceEpoch - 86_400)).start == staged)
        #expect(plan.resolved(publishedAt: nil).start == staged)
        #expect(
            plan.resolved(publishedAt: Timestamp(secondsSinceEpoch: staged.secondsSinceEpoch + 7_200)).start.secondsSinceEpoch == staged.secondsSinceEpoch
                + 7_200)
        // staged_at only on an active plan; anything else is refused as unreadable.
        #expect(TUFRollout(json: plan.json)?.stagedAt == staged)
        var paused = plan.paused(at: staged).json
        if case .object(var members) = paused { members.append(("staged_at", .string(staged.rfc3339))); paused = .object(members) }
        #expect(TUFRollout(json: paused) == nil)
    }
}
