import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
@testable import SignetManifest
@testable import SignetReverify
@testable import SignetArchive
@testable import SignetNetwork
@testable import SignetPackage
@testable import SignetInstall
@testable import SignetTUF
@testable import SignetPublish
@testable import SignetUpdate

/// FORMAT.md §7, "Which release a device installs": the device's one decision — install a
/// release, which one, what it reports and notes for `status DIR` — as a pure function of the
/// listing, what DIR holds and its records, the options and the clock. Every row runs in
/// memory; the CLI suites prove the same answers end to end against real servers.
@Suite("The update decision, table-tested")
struct UpdateDecisionTests {
    static let start = Timestamp(rfc3339: "2026-12-01T00:00:00Z")!
    static let now = Timestamp(secondsSinceEpoch: start.secondsSinceEpoch + 7_200)
    static let id = Array("4c4c4544004d3510804bb4c04f564433".utf8)

    static func release(_ sequence: UInt64, _ plan: String? = nil, halted: Bool = false, manifest: Character = "0") throws -> TUFPackageTarget {
        var rollout = try plan.map { try TUFRollout(plan: $0, start: start) }
        if halted { rollout = rollout?.halted }
        return TUFPackageTarget(
            target: "app-\(sequence).zip", name: "app", version: "1.\(sequence)", sequence: sequence,
            manifestSHA256: String(repeating: manifest, count: 64), channels: ["stable"], length: 1,
            sha256: String(repeating: "0", count: 64), rollout: rollout)
    }

    static func installed(_ sequence: UInt64) -> InstalledRelease {
        InstalledRelease(name: "app", version: "1.\(sequence)", sequence: sequence)
    }

    static func records(holding manifest: Character = "0", _ change: (inout ReleaseRecord) -> Void = { _ in }) -> ReleaseRecord {
        var records = ReleaseRecord()
        records.current_manifest_sha256 = String(repeating: manifest, count: 64)
        change(&records)
        return records
    }

    static func decide(
        _ releases: [TUFPackageTarget], installed: InstalledRelease?, records: ReleaseRecord = ReleaseRecord(),
        _ change: (inout UpdateDecision.Options) -> Void = { _ in }
    ) throws -> UpdateDecision {
        var options = UpdateDecision.Options()
        change(&options)
        return try #require(
            try UpdateDecision.decide(
                releases: releases, installed: installed, records: records, options: options,
                at: now, deviceID: { id }))
    }

    /// A wave that has not reached `id` at `now`: 0.01% opens bucket 0 only.
    static func waiting(_ sequence: UInt64) throws -> TUFPackageTarget {
        let release = try release(sequence, "0.01%@0h,100%@30d")
        #expect(TUFRollout.bucket(deviceID: id, name: "app", sequence: sequence) > 0, "the table's device is outside the first wave")
        return release
    }

    @Test("fresh, newer, up to date, re-signed, older: what is installed and reported")
    func plainRows() throws {
        let two = try Self.release(2), three = try Self.release(3)
        let fresh = try Self.decide([two, three], installed: nil)
        #expect(fresh.action == .install && fresh.release == three && fresh.updateAvailable && !fresh.channelIsOlder)
        #expect(fresh.channelNote == nil, "DIR holds nothing: no note for status")

        let newer = try Self.decide([two, three], installed: Self.installed(2), records: Self.records())
        #expect(newer.action == .install && newer.release == three && newer.deferred == nil)
        #expect(newer.channelNote == .init(sequence: 3, version: "1.3", note: nil))

        let current = try Self.decide([two, three], installed: Self.installed(3), records: Self.records())
        #expect(current.action == .none && current.release == three && !current.updateAvailable && current.deferred == nil)

        let resigned = try Self.decide([try Self.release(3, manifest: "a")], installed: Self.installed(3), records: Self.records())
        #expect(resigned.action == .install, "the held release re-signed (a new manifest, same sequence) is installed again")

        let older = try Self.decide([two], installed: Self.installed(3), records: Self.records())
        #expect(older.action == .none && older.channelIsOlder && !older.updateAvailable, "a repository cannot push an older release")

        let otherName = try Self.decide([three], installed: InstalledRelease(name: "other", version: "9", sequence: 9), records: Self.records())
        #expect(otherName.action == .install, "DIR holding another name: the channel's release replaces it")
    }

    @Test("held, waiting for its wave, locked, halted: nothing installed, and the reason noted for status")
    func deferredRows() throws {
        let two = try Self.release(2), three = try Self.release(3)
        let held = try Self.decide([two, three], installed: Self.installed(2), records: Self.records()) { $0.hold = true }
        #expect(held.action == .none && held.release == three && held.updateAvailable)
        #expect(held.deferred == "held: this device installs nothing new (hold)" && held.channelNote?.note == held.deferred)

        let wave = try Self.waiting(3)
        let waiting = try Self.decide([two, wave], installed: Self.installed(2), records: Self.records())
        #expect(waiting.action == .none && waiting.release == wave && waiting.updateAvailable)
        #expect(waiting.deferred?.hasPrefix("waiting: 1.3 (sequence 3) is rolling out to 0.01% of devices") == true)
        #expect(waiting.rollout?.eligible == false && waiting.choice.chosen == two)
        // The same wave, a device that holds nothing: it gets the release the wave left it.
        let empty = try Self.decide([two, wave], installed: nil)
        #expect(empty.action == .install && empty.release == two && empty.deferred?.hasPrefix("waiting:") == true)

        let locked = try Self.decide([two, three], installed: Self.installed(2), records: Self.records()) { $0.versionLock = .sequence(2) }
        #expect(locked.action == .none && locked.deferred == "locked: this device's version lock (sequence 2) excludes 1.3 (sequence 3)")

        let haltedHeld = try Self.decide([try Self.release(3, "100%@0h", halted: true)], installed: Self.installed(3), records: Self.records())
        #expect(haltedHeld.action == .none && haltedHeld.deferred == nil)
        #expect(haltedHeld.channelNote?.note == "halted: the publisher halted the rollout of 1.3 (sequence 3); this device keeps it")
    }

    @Test("bad releases, --retry-bad, --repair and hooks left unfinished")
    func recordRows() throws {
        let two = try Self.release(2), three = try Self.release(3)
        let bad = Self.records { $0.bad["app"] = .init(sequence: 3, reason: "health check failed", at: "2026-12-01T01:00:00Z", sequences: [3]) }
        let refused = try Self.decide([two, three], installed: Self.installed(2), records: bad)
        #expect(refused.action == .refusedBad(RefusedRelease(sequence: 3, reason: "health check failed", at: "2026-12-01T01:00:00Z")))
        #expect(!refused.updateAvailable && refused.channelNote == nil, "held back quietly, not news every hour")
        #expect(try Self.decide([two, three], installed: Self.installed(2), records: bad) { $0.retryBad = true }.action == .install)
        let newer = try Self.release(4)
        #expect(
            try Self.decide([two, three, newer], installed: Self.installed(2), records: bad).action == .install,
            "a higher sequence than the refused one is installed")

        #expect(try Self.decide([two, three], installed: Self.installed(3), records: Self.records()) { $0.repair = true }.action == .repair)
        #expect(
            try Self.decide([two], installed: Self.installed(3), records: Self.records()) { $0.repair = true }.action == .none,
            "--repair of a release no longer listed: nothing to fetch it from")
        let unchecked = Self.records { $0.unchecked = 3 }
        #expect(
            try Self.decide([three], installed: Self.installed(3), records: unchecked) { $0.healthCheckHook = true }.action == .repair,
            "a health check that never finished runs again")
        #expect(try Self.decide([three], installed: Self.installed(3), records: unchecked).action == .none, "no health check configured")
        #expect(
            try Self.decide([two, three], installed: Self.installed(2), records: Self.records()) {
                $0.hold = true; $0.repair = true
            }.action == .none)
    }

    @Test("the report is the decision's: one builder")
    func reportFromDecision() throws {
        let wave = try Self.waiting(3)
        let decision = try Self.decide([try Self.release(2), wave], installed: Self.installed(2), records: Self.records())
        let refresh = TUFRefreshReport(
            rootVersion: 1, rootsWalked: 0, timestampVersion: 1, snapshotVersion: 1, targetsVersion: 1, requests: 4, bytesReceived: 10)
        let report = TUFUpdateReport(
            decision: decision, refresh: refresh, role: "targets", packageURL: "https://example/app-3.zip",
            installed: Self.installed(2), install: nil)
        #expect(report.release == wave && report.updateAvailable && report.deferred == decision.deferred && report.rollout == decision.rollout)
        let window = TUFUpdateReport(
            decision: decision, refresh: refresh, role: "targets", packageURL: "x", installed: nil, install: nil,
            deferredInstall: "outside the maintenance window")
        #expect(window.deferred == "outside the maintenance window", "the install layer's deferral wins")
    }
}
