import Foundation
import Testing
import Signet

/// Issue 53: a release's rollout plan, with an injected clock: a fleet of 1,000 device ids
/// installs in the shares the plan states; a pause holds the share, a resume goes on from it,
/// a halt offers the release to no one; the bucket function matches FORMAT.md §7's vector;
/// maintenance windows and version locks.
@Suite("Rollouts: plans, buckets, the fleet's shares")
struct RolloutTests {
    static let start = Timestamp(rfc3339: "2026-12-01T00:00:00Z")!
    static let fleet: [[UInt8]] = (0..<1_000).map { Array(String(format: "%032x", $0 &* 2_654_435_761).utf8) }

    static func at(hours: Int64) -> Timestamp { Timestamp(secondsSinceEpoch: start.secondsSinceEpoch + hours * 3_600) }

    /// The share of the fleet (in percent) whose bucket the plan covers at `time`.
    static func share(_ plan: TUFRollout, at time: Timestamp, sequence: UInt64 = 7) -> Double {
        let open = plan.openBuckets(at: time)
        let eligible = fleet.filter { TUFRollout.bucket(deviceID: $0, name: "app", sequence: sequence) < open }.count
        return Double(eligible) / Double(fleet.count) * 100
    }

    @Test("FORMAT.md §7's bucket vector: SHA-256 of id, 0x00, name, 0x00, sequence; first 8 bytes big-endian mod 10,000")
    func bucketVector() throws {
        let id = Array("4c4c4544004d3510804bb4c04f564433".utf8)
        // Computed apart: python3 -c "import hashlib; print(int.from_bytes(hashlib.sha256(
        //   b'4c4c4544004d3510804bb4c04f564433\x00app\x007').digest()[:8], 'big') % 10000)"
        #expect(TUFRollout.bucket(deviceID: id, name: "app", sequence: 7) == 463)
        // Each release reorders the fleet.
        let first = Self.fleet.map { TUFRollout.bucket(deviceID: $0, name: "app", sequence: 7) }
        let second = Self.fleet.map { TUFRollout.bucket(deviceID: $0, name: "app", sequence: 8) }
        #expect(zip(first, second).filter { $0 == $1 }.count < 10)
        #expect(first.allSatisfy { (0..<10_000).contains($0) })
    }

    @Test("At each step the fleet's share is the plan's within 2 points; before the start none; paused it holds; resumed it goes on; halted none")
    func fleetShares() throws {
        let plan = try TUFRollout(plan: "1%@0h,10%@24h,50%@72h,100%@144h", start: Self.start)
        #expect(plan.planText == "1%@0h,10%@1d,50%@3d,100%@6d")
        #expect(Self.share(plan, at: Self.at(hours: -1)) == 0)
        for (hours, percent) in [(0, 1.0), (23, 1.0), (24, 10.0), (71, 10.0), (72, 50.0), (143, 50.0), (144, 100.0), (10_000, 100.0)] as [(Int64, Double)] {
            let share = Self.share(plan, at: Self.at(hours: hours))
            #expect(abs(share - percent) <= 2, "at \(hours) h: \(share)% installs, the plan says \(percent)%")
        }
        // Paused at 30 h (10% open): still 10% at 100 h.
        let paused = plan.paused(at: Self.at(hours: 30))
        #expect(abs(Self.share(paused, at: Self.at(hours: 100)) - 10) <= 2)
        #expect(paused.opens(9_999, at: Self.at(hours: 100)) == nil, "no date while paused")
        // Resumed at 130 h: 100 h were paused, so 50% opens at 172 h, not 72 h.
        let resumed = paused.resumed(at: Self.at(hours: 130))
        #expect(abs(Self.share(resumed, at: Self.at(hours: 171)) - 10) <= 2)
        #expect(abs(Self.share(resumed, at: Self.at(hours: 172)) - 50) <= 2)
        #expect(resumed.opens(4_000, at: Self.at(hours: 130)) == Self.at(hours: 172))
        #expect(Self.share(plan.halted, at: Self.at(hours: 1_000)) == 0)
    }

    @Test("Plans: named ones, fractions of a percent, and every malformed plan refused by name")
    func plans() throws {
        #expect(try TUFRollout(plan: "default", start: Self.start).steps.count == 7)
        #expect(try TUFRollout(plan: "now", start: Self.start).openBuckets(at: Self.start) == 10_000)
        #expect(try TUFRollout(plan: "0.5%@0h,12.25%@90m,100%@2d", start: Self.start).steps.map(\.buckets) == [50, 1_225, 10_000])
        for bad in ["", "10%", "10@0h", "10%@0h,5%@1h", "10%@2h,20%@1h", "101%@0h", "0%@0h", "1.234%@0h", "10%@0x", "10%@367d",
                    "-1%@0h", "10%@-1h", "1e2%@0h", "10%@99999999999999999999h", "+5%@0h"] {
            #expect(throws: SignetError.self, "'\(bad)'") { try TUFRollout(plan: bad, start: Self.start) }
        }
    }

    @Test("Maintenance windows: days, spans, spans past midnight (the day they start on), and every malformed window refused")
    func windows() throws {
        // Local wall-clock times (the window is in local time): Monday 2026-11-30 is day 0 here.
        let monday = Timestamp(rfc3339: "2026-11-30T00:00:00Z")!.secondsSinceEpoch
        func local(day: Int64, _ hour: Int64, _ minute: Int64 = 0) -> Timestamp {
            let utc = monday + day * 86_400 + hour * 3_600 + minute * 60
            let offset = Int64(TimeZone.current.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(utc))))
            return Timestamp(secondsSinceEpoch: utc - offset)
        }
        let weekdays = try MaintenanceWindow("Mon..Fri 02:00..04:00")
        #expect(weekdays.contains(local(day: 0, 2)) && weekdays.contains(local(day: 4, 3, 59)))
        #expect(!weekdays.contains(local(day: 0, 4)) && !weekdays.contains(local(day: 0, 1, 59)) && !weekdays.contains(local(day: 5, 3)))
        let night = try MaintenanceWindow("Fri 22:00..02:00")
        #expect(night.contains(local(day: 4, 23)) && night.contains(local(day: 5, 1, 30)))
        #expect(!night.contains(local(day: 3, 23)) && !night.contains(local(day: 4, 1)) && !night.contains(local(day: 5, 2)))
        let weekend = try MaintenanceWindow("Sat,Sun 00:00..24:00")
        #expect(weekend.contains(local(day: 5, 0)) && weekend.contains(local(day: 6, 23, 59)) && !weekend.contains(local(day: 0, 12)))
        #expect(try MaintenanceWindow("Sun..Tue 10:00..11:00").days == [0, 1, 2])
        for bad in ["", "02:00", "Mon..Fri", "Mon..Fri 2:00..4:00", "Mon..Fri 02:00-04:00", "Funday 02:00..04:00", "Mon 02:00..02:00",
                    "Mon 25:00..26:00", "Mon 02:60..03:00", "Mon 24:00..01:00", "Mo 01:00..02:00", "Mon 01:00..02:00 extra"] {
            #expect(throws: SignetError.self, "'\(bad)'") { try MaintenanceWindow(bad) }
        }
    }

    @Test("Version locks: a sequence, or a version prefix on a component boundary")
    func versionLocks() throws {
        #expect(try VersionLock("42") == .sequence(42))
        let lock = try VersionLock("1.4")
        #expect(lock.allows(version: "1.4", sequence: 1) && lock.allows(version: "1.4.2", sequence: 2) && lock.allows(version: "1.4-rc1", sequence: 3))
        #expect(!lock.allows(version: "1.40", sequence: 4) && !lock.allows(version: "1.5", sequence: 5))
        #expect(try VersionLock("1.").allows(version: "1.9", sequence: 1))
        #expect(throws: SignetError.self) { try VersionLock("1 4") }
        #expect(throws: SignetError.self) { try VersionLock("") }
    }
}
