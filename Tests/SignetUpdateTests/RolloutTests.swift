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
import SignetTestSupport
import SignetCryptoTestSupport
import SignetPackageTestSupport

/// Issue 53: a release's rollout plan, with an injected clock: a fleet of 1,000 device ids
/// installs in the shares the plan states; a pause holds the share, a resume goes on from it,
/// a halt offers the release to no one; the bucket function matches FORMAT.md §7's vector;
/// maintenance windows and version locks.
@Suite("Rollouts: plans, buckets, the fleet's shares")
struct RolloutTests {
    static let start = Timestamp(rfc3339: "2026-12-01T00:00:00Z")!
    /// 1,000 machine-id-like device ids (32 hex digits: SHA-256 of "device-N", cut). A fleet of
    /// 1,000 is a sample: at 50% its share has a standard deviation of 1.6 points, so "within 2
    /// points" holds for a given release with a probability of about 0.8 at that step. The
    /// releases these tests use are ones where it does; `uniform` proves the bucket function
    /// itself on 100,000 ids, within 0.5 points (three standard deviations) at every step.
    static let fleet: [[UInt8]] = ids(count: 1_000)

    static func id(_ index: Int) -> [UInt8] {
        Array((try! Digest.compute(Array("device-\(index)".utf8), algorithm: .sha256)).hex.prefix(32).utf8)
    }

    static func ids(count: Int) -> [[UInt8]] { (0..<count).map(id) }

    static func at(hours: Int64) -> Timestamp { Timestamp(secondsSinceEpoch: start.secondsSinceEpoch + hours * 3_600) }

    /// The share of the fleet (in percent) whose bucket the plan covers at `time`.
    static func share(_ plan: TUFRollout, at time: Timestamp, sequence: UInt64 = 8) -> Double {
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

    @Test(
        "The device id is its bytes as read, trimmed of ASCII white space only: ids that are not UTF-8 get the buckets FORMAT.md's formula gives (Python's hashlib), not one shared bucket"
    )
    func deviceIDBytes() throws {
        let work = try TemporaryDirectory()
        var buckets: [Int] = []
        let ids: [[UInt8]] = [[0xff, 0xff, 0xff, 0xff], [0xfe, 0xfe, 0xfe, 0xfe], [0xc3, 0x28, 0x80, 0x20]]
        for (index, raw) in ids.enumerated() {
            let path = work.file("id-\(index)")
            try Data([0x20] + raw + [0x0d, 0x0a]).write(to: URL(fileURLWithPath: path))
            let id = try TUFUpdater.deviceID(path)
            #expect(id == (raw.last == 0x20 ? Array(raw.dropLast()) : raw), "trimmed of ASCII white space only")
            buckets.append(TUFRollout.bucket(deviceID: id, name: "app", sequence: 7))
        }
        let script =
            "import hashlib\nfor i in [b'\\xff'*4, b'\\xfe'*4, b'\\xc3\\x28\\x80']: print(int.from_bytes(hashlib.sha256(i + b'\\x00app\\x007').digest()[:8], 'big') % 10000)"
        let expected = try SignetTestSupport.run("python3", ["-c", script]).stdoutText.split(separator: "\n").compactMap { Int($0) }
        #expect(buckets == expected && Set(buckets).count == 3, "\(buckets) against \(expected)")
        // A non-breaking space (U+00A0) is not ASCII white space: it stays part of the id.
        try Data([0x61, 0xc2, 0xa0]).write(to: URL(fileURLWithPath: work.file("nbsp")))
        #expect(try TUFUpdater.deviceID(work.file("nbsp")) == [0x61, 0xc2, 0xa0])
    }

    @Test("The bucket function is uniform: of 100,000 device ids, each step's share is the plan's within 0.5 points")
    func uniform() throws {
        let buckets = Self.ids(count: 100_000).map { TUFRollout.bucket(deviceID: $0, name: "app", sequence: 7) }
        for percent in [1, 5, 10, 15, 40, 50, 60, 90] {
            let share = Double(buckets.filter { $0 < percent * 100 }.count) / 1_000
            #expect(abs(share - Double(percent)) <= 0.5, "\(percent)%: \(share)% of 100,000 devices")
        }
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
        for bad in [
            "", "10%", "10@0h", "10%@0h,5%@1h", "10%@2h,20%@1h", "101%@0h", "0%@0h", "1.234%@0h", "10%@0x", "10%@367d",
            "-1%@0h", "10%@-1h", "1e2%@0h", "10%@99999999999999999999h", "+5%@0h"
        ] {
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
        for bad in [
            "", "02:00", "Mon..Fri", "Mon..Fri 2:00..4:00", "Mon..Fri 02:00-04:00", "Funday 02:00..04:00", "Mon 02:00..02:00",
            "Mon 25:00..26:00", "Mon 02:60..03:00", "Mon 24:00..01:00", "Mo 01:00..02:00", "Mon 01:00..02:00 extra"
        ] {
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

    @Test(
        "A fleet of 1,000 devices against one repository on nginx: the plan the verified metadata carries opens each step's share within 2 points; paused it stops growing"
    )
    func fleetOnNginx() throws {
        let server = try HTTPSServer.site("RolloutTests")
        let key = try Fixtures.signingKey()
        let work = try TemporaryDirectory()
        let site = server.www + "/rollout-fleet"
        let one = TUFRepository.RoleKeys(keys: [key.publicKey])
        let repository = try TUFRepository.create(at: site, root: one, targets: one, snapshot: one, timestamp: one)
        #expect(try repository.sign("root", with: key, reviewed: try repository.review("root")!.digest).published)
        let (_, package) = try PackageFixture.package(work, sequence: 10, name: "assets-10.zip")
        // Steps an hour apart, so the injected clock stays within the timestamp's lifetime.
        let start = Timestamp(secondsSinceEpoch: Timestamp.now.secondsSinceEpoch - 60)
        _ = try repository.add(package: package, channels: ["stable"], rollout: try TUFRollout(plan: "1%@0h,10%@1h,50%@3h,100%@6h", start: start))
        #expect(try repository.sign("targets", with: key, reviewed: try repository.review("targets")!.digest).published)
        _ = try repository.refresh(snapshotKeys: [key], timestampKeys: [key])
        try TUFClient.initialize(metadataDirectory: work.file("metadata"), trustedRoot: Array(contents(site + "/metadata/1.root.json")))
        let idFile = work.file("machine-id")
        try Data((String(decoding: Self.fleet[0], as: UTF8.self) + "\n").utf8).write(to: URL(fileURLWithPath: idFile))
        func check(at time: Timestamp) throws -> TUFUpdateReport {
            var options = TUFUpdateOptions(
                client: TUFClientOptions(metadataDirectory: work.file("metadata"), metadataURL: server.url("rollout-fleet/metadata/")), channel: "stable")
            options.client.download = try PackageFixture.downloadOptions(server)
            options.client.now = time
            options.checkOnly = true
            options.deviceIDFile = idFile
            return try TUFUpdater.update(to: work.file("app"), options: options)
        }
        func share(_ release: TUFPackageTarget, at time: Timestamp) -> Double {
            let eligible = Self.fleet.filter { TUFUpdater.rolloutStatus(of: release, deviceID: $0, at: time)?.eligible == true }.count
            return Double(eligible) / Double(Self.fleet.count) * 100
        }
        for (hours, percent) in [(0, 1.0), (1, 10.0), (3, 50.0), (6, 100.0)] as [(Int64, Double)] {
            let time = Timestamp(secondsSinceEpoch: start.secondsSinceEpoch + hours * 3_600 + 1)
            let report = try check(at: time)
            let status = try #require(report.rollout, "the served release carries its plan")
            #expect(
                status == TUFUpdater.rolloutStatus(of: report.release, deviceID: Self.fleet[0], at: time), "the device's own decision is the fleet's function")
            #expect(status.openBuckets == Int(percent * 100))
            let measured = share(report.release, at: time)
            #expect(abs(measured - percent) <= 2, "at \(hours) h: \(measured)% of the fleet installs, the plan says \(percent)%")
        }
        // Paused at 90 minutes (10% open), published: the share stays at 10% at 5 hours.
        let pausedAt = Timestamp(secondsSinceEpoch: start.secondsSinceEpoch + 90 * 60)
        _ = try repository.changeRollout(of: "assets", .pause, now: pausedAt)
        #expect(try repository.sign("targets", with: key, reviewed: try repository.review("targets")!.digest).published)
        _ = try repository.refresh(snapshotKeys: [key], timestampKeys: [key])
        let later = Timestamp(secondsSinceEpoch: start.secondsSinceEpoch + 5 * 3_600)
        let paused = try check(at: later)
        #expect(paused.rollout?.state == .paused)
        #expect(abs(share(paused.release, at: later) - 10) <= 2)
    }
}

/// FORMAT.md §7, "Which release a device installs": while a release rolls out, is paused or is
/// halted, a device its wave has not reached installs the newest release that has reached it,
/// so an empty or reset device is never left with nothing. A repository on nginx, devices with
/// an injected clock (nothing waits on real time).
@Suite("Rollouts: every device gets the newest release that has reached it")
struct ReleaseChoiceTests {
    typealias Fleet = RolloutTests

    /// The repository, its key, and the verified releases a device sees at a time.
    struct Site {
        let server: HTTPSServer
        let key: PrivateKey
        let work: TemporaryDirectory
        let repository: TUFRepository
        let path: String

        init(_ name: String) throws {
            server = try HTTPSServer.site("RolloutTests")
            key = try Fixtures.signingKey()
            work = try TemporaryDirectory()
            path = name
            let one = TUFRepository.RoleKeys(keys: [key.publicKey])
            repository = try TUFRepository.create(at: server.www + "/" + name, root: one, targets: one, snapshot: one, timestamp: one)
            #expect(try repository.sign("root", with: key, reviewed: try repository.review("root")!.digest).published)
        }

        /// Signs what is staged and publishes it.
        func publish(now: Timestamp = .now) throws {
            #expect(try repository.sign("targets", with: key, reviewed: try repository.review("targets", now: now)!.digest, now: now).published)
            _ = try repository.refresh(snapshotKeys: [key], timestampKeys: [key], now: now)
        }

        func add(_ sequence: UInt64, plan: String? = nil, start: Timestamp? = nil) throws {
            let (_, package) = try PackageFixture.package(work, sequence: sequence, name: "assets-\(sequence).zip", extra: "release \(sequence)\n")
            _ = try repository.add(package: package, channels: ["stable"], rollout: try plan.map { try TUFRollout(plan: $0, start: start ?? .now) })
            try publish()
        }

        /// A device with an empty DIR (or the one given) and id `id`, updated at `time`.
        func update(_ id: [UInt8], dest: String? = nil, at time: Timestamp, check: Bool = false) throws -> (TUFUpdateReport, String) {
            let folder = work.file("device-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try Data(id + [0x0a]).write(to: URL(fileURLWithPath: folder + "/machine-id"))
            try TUFClient.initialize(metadataDirectory: folder + "/metadata", trustedRoot: Array(contents(server.www + "/\(path)/metadata/1.root.json")))
            var options = TUFUpdateOptions(
                client: TUFClientOptions(metadataDirectory: folder + "/metadata", metadataURL: server.url("\(path)/metadata/")), channel: "stable")
            options.client.download = try PackageFixture.downloadOptions(server)
            options.client.now = time
            options.install.now = time
            options.checkOnly = check
            options.deviceIDFile = folder + "/machine-id"
            let dest = dest ?? folder + "/app"
            return (try TUFUpdater.update(to: dest, options: options), folder)
        }

        /// The releases the device's verified metadata lists for stable.
        func listed(_ folder: String) throws -> [TUFPackageTarget] {
            try TUFPackageListing.stored(in: folder + "/metadata").map(\.release).filter { $0.channels.contains("stable") }
        }
    }

    /// What each of the fleet's 1,000 devices would install from `releases` at `time` (the
    /// sequence; nil for none).
    static func fleetChoices(_ releases: [TUFPackageTarget], at time: Timestamp) throws -> [UInt64?] {
        try Fleet.fleet.map { id in try TUFReleaseChoice.choose(among: releases, deviceID: { id }, at: time)?.chosen?.sequence }
    }

    static func installed(_ dest: String) throws -> UInt64? { try InstalledRelease.inspect(dest, force: false)?.sequence }

    @Test(
        "A fleet of empty devices at each step of a plan, after a pause and after a halt: each installs the newest release whose wave includes it, else the one before; none is left empty; an emergency plan lets the older release go"
    )
    func emptyDevicesMidRollout() throws {
        let site = try Site("choice-fleet")
        try site.add(10)
        let start = Timestamp(secondsSinceEpoch: Timestamp.now.secondsSinceEpoch - 60)
        try site.add(11, plan: "10%@0h,50%@1h,100%@3h", start: start)
        func at(minutes: Int64) -> Timestamp { Timestamp(secondsSinceEpoch: start.secondsSinceEpoch + minutes * 60 + 1) }
        let buckets = Fleet.fleet.map { TUFRollout.bucket(deviceID: $0, name: "assets", sequence: 11) }
        // Devices in the first wave, in the second, and in neither.
        let first = try #require(buckets.firstIndex { $0 < 1_000 })
        let second = try #require(buckets.firstIndex { (1_000..<5_000).contains($0) })
        let late = try #require(buckets.firstIndex { $0 >= 5_000 })

        for (minutes, share, reached) in [(0, 10.0, [first]), (60, 50.0, [first, second])] as [(Int64, Double, [Int])] {
            let time = at(minutes: minutes)
            // Real installs into empty DIRs.
            for device in [first, second, late] {
                let (report, folder) = try site.update(Fleet.fleet[device], at: time)
                let expected: UInt64 = reached.contains(device) ? 11 : 10
                #expect(try Self.installed(folder + "/app") == expected, "at \(minutes) min, bucket \(buckets[device])")
                #expect(report.choice?.chosen?.sequence == expected && report.choice?.newest.sequence == 11)
                #expect(report.choice?.reason == (expected == 11 ? .newest : .waveNotReached))
                #expect((report.deferred?.hasPrefix("waiting: v11 (sequence 11)") ?? false) == (expected == 10), "\(report.deferred ?? "nil")")
                if device == late && minutes == 0 {
                    // The channel keeps the release before the one rolling out.
                    #expect(try site.listed(folder).map(\.sequence).sorted() == [10, 11])
                }
            }
            // The whole fleet, from what a device verified: nobody empty, the plan's share on 11.
            let (_, folder) = try site.update(Fleet.fleet[0], at: time, check: true)
            let choices = try Self.fleetChoices(site.listed(folder), at: time)
            #expect(!choices.contains(nil), "no device is left without a release")
            // Exactly the devices whose bucket the plan has opened (the bucket function's spread
            // is `uniform`'s subject): on 11, the rest on 10.
            let open = Int(share * 100)
            #expect(choices == buckets.map { $0 < open ? 11 : 10 }, "at \(minutes) min")
        }

        // A device on 10 moves up once its wave comes.
        let (_, movingFolder) = try site.update(Fleet.fleet[second], at: at(minutes: 0))
        #expect(try Self.installed(movingFolder + "/app") == 10)
        _ = try site.update(Fleet.fleet[second], dest: movingFolder + "/app", at: at(minutes: 60))
        #expect(try Self.installed(movingFolder + "/app") == 11)

        // Paused at 90 minutes: at 5 hours the share is still 50%, and the rest still get 10.
        _ = try site.repository.changeRollout(of: "assets", .pause, now: at(minutes: 90))
        try site.publish()
        let later = at(minutes: 300)
        let (paused, pausedFolder) = try site.update(Fleet.fleet[late], at: later)
        #expect(try Self.installed(pausedFolder + "/app") == 10 && paused.choice?.reason == .waveNotReached)
        let pausedChoices = try Self.fleetChoices(site.listed(pausedFolder), at: later)
        #expect(pausedChoices == buckets.map { $0 < 5_000 ? 11 : 10 }, "paused at 50%")

        // Halted: every empty device gets 10; one that holds 11 keeps it.
        _ = try site.repository.changeRollout(of: "assets-11.zip", .halt, now: later)
        try site.publish()
        let (halted, haltedFolder) = try site.update(Fleet.fleet[first], at: later)
        #expect(try Self.installed(haltedFolder + "/app") == 10 && halted.choice?.reason == .halted)
        #expect(halted.deferred?.hasPrefix("halted:") == true)
        #expect(try Self.fleetChoices(site.listed(haltedFolder), at: later).allSatisfy { $0 == 10 })
        let (kept, _) = try site.update(Fleet.fleet[second], dest: movingFolder + "/app", at: later)
        #expect(try Self.installed(movingFolder + "/app") == 11 && kept.install == nil && kept.rollout?.state == .halted)

        // Re-planned to `now`: 11 reaches every device, and the channel lets 10 go.
        _ = try site.repository.changeRollout(of: "assets-11.zip", .replace(try TUFRollout(plan: "now", start: later)), now: later)
        try site.publish()
        let (_, nowFolder) = try site.update(Fleet.fleet[late], at: later)
        #expect(try Self.installed(nowFolder + "/app") == 11)
        #expect(try site.listed(nowFolder).map(\.sequence) == [11])
    }

    @Test("The choice, table-tested: version locks, halts, --ignore-rollout, equal sequences; what a channel keeps")
    func table() throws {
        let time = RolloutTests.at(hours: 2)
        func release(_ sequence: UInt64, _ plan: String? = nil, state: TUFRollout.State = .active) throws -> TUFPackageTarget {
            var rollout = try plan.map { try TUFRollout(plan: $0, start: RolloutTests.start) }
            if state == .halted { rollout = rollout?.halted }
            return TUFPackageTarget(
                target: "app-\(sequence).zip", name: "app", version: "1.\(sequence)", sequence: sequence,
                manifestSHA256: String(repeating: "0", count: 64), channels: ["stable"], length: 1, sha256: String(repeating: "0", count: 64),
                rollout: rollout)
        }
        let id = RolloutTests.fleet[0]
        let bucket = TUFRollout.bucket(deviceID: id, name: "app", sequence: 3)
        let closed = try release(3, "0.01%@0h,100%@30d")
        let open = try release(3, "100%@0h")
        let plain = try release(2)
        var reads = 0
        func choose(_ releases: [TUFPackageTarget], ignore: Bool = false, lock: VersionLock? = nil) throws -> TUFReleaseChoice? {
            try TUFReleaseChoice.choose(
                among: releases,
                deviceID: {
                    reads += 1; return id
                }, at: time, ignoreRollout: ignore, versionLock: lock)
        }
        #expect(try choose([]) == nil)
        #expect(try choose([plain])?.chosen == plain && reads == 0, "no plan: the device id is not read")
        if bucket > 0 {
            let waiting = try #require(try choose([closed, plain]))
            #expect(waiting.chosen == plain && waiting.reason == .waveNotReached && waiting.passedOver.map(\.release) == [closed])
            #expect(try choose([plain, closed], ignore: true)?.chosen == closed, "--ignore-rollout: the newest")
            #expect(try choose([plain, closed], ignore: true)?.reason == .rolloutIgnored)
        }
        #expect(try choose([plain, open])?.chosen == open)
        #expect(try choose([open, plain])?.reason == .newest)
        let halted = try release(3, "100%@0h", state: .halted)
        #expect(try choose([halted, plain], ignore: true)?.chosen == plain, "never a halted release, not even with --ignore-rollout")
        #expect(try choose([halted])?.chosen == nil && (try choose([halted]))?.reason == .halted)
        #expect(try choose([open, plain], lock: .sequence(2))?.chosen == plain)
        #expect(try choose([open, plain], lock: .sequence(2))?.reason == .versionLock)
        #expect(try choose([open, plain], lock: .versionPrefix("1.9"))?.chosen == nil)
        // An emergency plan (every bucket open) or a halted one needs no device id.
        struct NoID: Error {}
        let now = try release(3, "now")
        #expect(try TUFReleaseChoice.choose(among: [now, plain], deviceID: { throw NoID() }, at: time)?.chosen == now)
        #expect(try TUFReleaseChoice.choose(among: [halted, plain], deviceID: { throw NoID() }, at: time)?.chosen == plain)
        #expect(throws: NoID.self) { try TUFReleaseChoice.choose(among: [closed, plain], deviceID: { throw NoID() }, at: time) }
        // What a channel keeps: down to the newest release fully rolled out.
        let old = try release(1)
        #expect(TUFChannel.kept([old, plain, closed], at: time) == [closed, plain])
        #expect(TUFChannel.kept([old, plain, open], at: time) == [open])
        #expect(TUFChannel.kept([old, halted, plain], at: time) == [halted, plain])
        #expect(TUFChannel.kept([closed], at: time) == [closed])
    }
}

/// FORMAT.md §7, "Maintenance windows" (issue 62): the window is judged by the clock at the
/// swap, not when the run started. An injected clock that moves during the run: the run starts
/// in the last minute of the window and reaches the swap just after it.
@Suite("Maintenance windows: judged at the swap")
struct WindowAtSwapTests {
    @Test("a run that starts inside its window and reaches the swap after it keeps what it staged and defers; one whose swap is still inside installs")
    func judgedAtSwap() throws {
        let window = try MaintenanceWindow("02:00..04:00")
        // The window's last minute, found on the clock the window reads (local time).
        var last = Timestamp(secondsSinceEpoch: 1_780_000_000 - 1_780_000_000 % 60)
        while !(window.contains(last) && !window.contains(Timestamp(secondsSinceEpoch: last.secondsSinceEpoch + 60))) {
            last = Timestamp(secondsSinceEpoch: last.secondsSinceEpoch + 60)
        }
        let start = Timestamp(secondsSinceEpoch: last.secondsSinceEpoch + 15)
        let swapLate = Timestamp(secondsSinceEpoch: last.secondsSinceEpoch + 65)
        let directory = try TemporaryDirectory()
        let (_, package) = try PackageFixture.package(directory)
        var options = InstallOptions()
        options.windows = [window]
        options.now = start
        options.clock = { swapLate }
        let dest = directory.file("app")
        #expect(throws: SignetError.self) { try Installer.install(package, to: dest, policy: try PackageFixture.policy, options: options) }
        do {
            _ = try Installer.install(package, to: dest, policy: try PackageFixture.policy, options: options)
        } catch let error as SignetError {
            #expect(error.code == .installDeferred && error.reason.contains("outside the maintenance window"), "\(error)")
        }
        #expect(!FileManager.default.fileExists(atPath: dest + "/.signet"), "nothing installed")
        options.clock = { start }
        let report = try Installer.install(package, to: dest, policy: try PackageFixture.policy, options: options)
        #expect(report.manifest?.sequence == 10)
    }
}
