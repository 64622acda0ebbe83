import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
public import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetReverify
import SignetPackage

/// Options of ``Installer/rollback(_:options:)-(String,_)``.
public struct RollbackOptions: Sendable {
    /// Roll back only a release that is still pending (``InstallOptions/pending``) and was
    /// installed in an earlier boot: the boot unit's check. Otherwise nothing is done.
    public var bootCheck = false
    /// The install state to record the rollback in (`--state`): the destination's recorded
    /// release becomes the restored one, with `rolled_back_from`, while the highest sequence
    /// installed stays recorded (a server still cannot push an older release).
    public var stateFile: String? = nil
    /// How long to wait, in seconds, for another process updating the destination.
    public var wait: Double = 10
    /// The post-install command (``InstallHooks/postInstall``), run after the swap with
    /// `SIGNET_EVENT=rollback`, as after a health check's rollback (the app learns
    /// of every rollback, whoever made it).
    public var postInstall: [String]? = nil

    public init() {}
}

/// What ``Installer/rollback(_:options:)-(String,_)`` did.
public struct RollbackReport: Sendable {
    /// The release swapped out (now recorded as bad); nil when nothing was done.
    public let from: Release?
    /// The release swapped back in.
    public let to: Release?
    /// Why nothing was done (``RollbackOptions/bootCheck``), when nothing was.
    public let skipped: String?
    /// The post-install command's run (``RollbackOptions/postInstall``), when there was one.
    public var hooks: [HookResult] = []
}

/// What `signet status DIR` shows of an installed destination.
public struct DestinationStatus: Sendable {
    public let destination: String
    /// The installed release (nil: DIR holds no signed tree).
    public let current: Release?
    /// The release kept beside it for a rollback.
    public let previous: Release?
    /// The current release waits to be confirmed, since this time.
    public let pendingSince: String?
    /// The current release was installed with a health check that has not passed yet (a run
    /// interrupted in a hook): it is neither confirmed nor known to be good.
    public var unchecked: Bool = false
    /// The post-install command started for the current release at this time never finished:
    /// Signet was killed while it ran. The next run with the command runs it again.
    public var postInstallUnfinished: String? = nil
    /// Releases refused as bad: name, highest refused sequence, why, when, and each sequence
    /// refused (nil for a record made before they were listed: every sequence from the highest
    /// down to the one DIR holds).
    public let bad: [(name: String, sequence: UInt64, reason: String, at: String, sequences: [UInt64]?)]
    /// The last rollback: from, to, by whom ("owner", "health-check", "boot-check"), when.
    public let lastRollback: (from: UInt64, to: UInt64, by: String, at: String)?
    /// What the last `update` found on the channel and did not install, and why; or that the
    /// release DIR holds was halted.
    public var channel: (sequence: UInt64, version: String, note: String, at: String)? = nil
}

extension ReleaseRecord {
    /// After a swap: the installed tree's manifest digest; the previous one's as `previous`
    /// made it.
    mutating func record(installed digest: String?, signer: PublicKey?, pending: Pending?, kept: Bool, previous: Staging.Previous) {
        switch previous {
        case .keep:
            previous_manifest_sha256 = kept ? current_manifest_sha256 : nil
            previous_signer = kept ? current_signer : nil
        case .discard: break
        case .none:
            previous_manifest_sha256 = nil
            previous_signer = nil
        }
        current_manifest_sha256 = digest
        channel = nil
        current_signer = signer.map { Data($0.subjectPublicKeyInfo).base64EncodedString() }
        self.pending = pending
    }
}

extension Installer {
    /// What becomes of the tree the swap replaces: kept when it is a confirmed release installed
    /// from a signed manifest and pinned by the record; removed, keeping the previous release,
    /// when it was never confirmed; removed with it under `--keep-previous=no`. The same
    /// release installed again (`--force`, `--repair`) is not kept either: the previous release
    /// stays the one before it.
    static func previousPolicy(
        options: InstallOptions, state: DestinationState, releases: ReleaseRecord, checked: PackageReader.Checked?,
        digest: String?
    ) -> Staging.Previous {
        guard options.keepPrevious, checked != nil else { return .none }
        guard case .installed(let manifest?) = state, let current = releases.current_manifest_sha256 else { return .none }
        if let pending = releases.pending, pending.sequence == manifest.sequence { return .discard }
        if current == digest { return .discard }
        return .keep
    }

    static func release(of state: DestinationState) -> Release? {
        if case .installed(let manifest?) = state { return Release(manifest) }
        return nil
    }

    /// The hooks after a swap (the destination's lock still held): the post-install command,
    /// then the health check; a failed health check swaps the previous release back, records
    /// this one as bad, runs the post-install command again for the restored release and
    /// throws `.healthCheckFailed`.
    ///
    /// With `recheck`, only the health check runs: DIR already holds the release, whose check
    /// never finished (the process was killed in it, the record says `unchecked`).
    /// The `SIGNET_*` variables every hook gets: the event, DIR, the new release and the old
    /// one (absent on a first install).
    static func hookEnvironment(event: String, destination: String, from: Release?, to: Release) -> [String: String] {
        var env = [
            "SIGNET_EVENT": event, "SIGNET_DEST": destination,
            "SIGNET_NEW_NAME": to.name, "SIGNET_NEW_VERSION": to.version, "SIGNET_NEW_SEQUENCE": String(to.sequence)
        ]
        if let from {
            env["SIGNET_OLD_NAME"] = from.name
            env["SIGNET_OLD_VERSION"] = from.version
            env["SIGNET_OLD_SEQUENCE"] = String(from.sequence)
        }
        return env
    }

    /// Ends what a post-install command started by a Signet killed in it still runs: the
    /// recorded process group, when it is that one (this boot, the same start time).
    static func endLeftoverHook(_ destination: String) {
        guard let run = (try? ReleaseRecord.read(for: destination))?.post_install, let pid = run.pid, let ticks = run.start_ticks,
            run.boot_id == (try? ReleaseRecord.bootID())
        else { return }
        ProcessStart.endGroup(pid, startedAt: ticks)
    }

    static func runHooks(_ report: inout InstallReport, old: Release?, options: InstallOptions, installState: InstallState?, recheck: Bool = false) throws {
        guard let manifest = report.manifest, options.hooks.postInstall != nil || options.hooks.healthCheck != nil else { return }
        let releasesBefore = try ReleaseRecord.read(for: report.destination)
        let new = Release(manifest)
        func environment(event: String, from: Release?, to: Release) -> [String: String] {
            var env = hookEnvironment(event: event, destination: report.destination, from: from, to: to)
            env["SIGNET_PENDING"] = report.pending ? "1" : "0"
            env["SIGNET_REPORT"] = reportJSON(report, from: from, to: to, event: event)
            return env
        }
        // Interrupted in a hook (SIGINT, SIGTERM): its process group was ended, and nothing is
        // recorded after it; the release stays unchecked for the next run.
        func checkInterrupted(_ hook: String) throws {
            guard HookRunner.isStopped else { return }
            throw SignetError(
                .interrupted,
                "interrupted in the \(hook) hook; \(new.description) is installed in '\(report.destination)'\(options.hooks.healthCheck != nil ? " but unchecked: the next run with the health check runs it" : "")",
                path: report.destination)
        }
        if let command = options.hooks.postInstall, !recheck || releasesBefore.post_install?.sequence == new.sequence {
            options.phase?(.hooks)
            // Recorded as running until it ends: a Signet killed in it (SIGKILL, a power cut)
            // leaves the record, and the next run ends what it left and runs it again.
            var releases = try ReleaseRecord.read(for: report.destination)
            let boot = (try? ReleaseRecord.bootID()) ?? ""
            releases.post_install = .init(sequence: new.sequence, pid: nil, start_ticks: nil, boot_id: boot, since: Timestamp.now.rfc3339)
            try releases.write(for: report.destination)
            let destination = report.destination
            report.hooks.append(
                HookRunner.run("post-install", command, environment: environment(event: "install", from: old, to: new), timeout: 600) { pid in
                    releases.post_install?.pid = pid
                    releases.post_install?.start_ticks = ProcessStart.ticks(of: pid)
                    try? releases.write(for: destination)
                })
            try checkInterrupted("post-install")
            releases.post_install = nil
            try releases.write(for: report.destination)
        }
        guard let check = options.hooks.healthCheck, !recheck || releasesBefore.unchecked == new.sequence else { return }
        // Recorded as unchecked until it passes: a process killed inside the check leaves the
        // release to be checked again by the next run (FORMAT.md §2, "Hooks").
        var releases = try ReleaseRecord.read(for: report.destination)
        releases.unchecked = new.sequence
        try releases.write(for: report.destination)
        options.phase?(.healthCheck)
        let result = HookRunner.run(
            "health-check", check, environment: environment(event: "health-check", from: old, to: new), timeout: options.hooks.healthTimeout)
        report.hooks.append(result)
        try checkInterrupted("health-check")
        guard !result.succeeded else {
            releases.unchecked = nil
            try releases.write(for: report.destination)
            return
        }
        let tail = result.output.split(separator: "\n").suffix(3).joined(separator: " | ")
        let why = result.timedOut ? "health check timed out after \(Int(options.hooks.healthTimeout)) s" : "health check failed (\(result.outcome))"
        guard releases.previous_manifest_sha256 != nil, old != nil else {
            releases.markBad(new.name, sequence: new.sequence, reason: why)
            releases.unchecked = nil
            try releases.write(for: report.destination)
            throw SignetError(
                .healthCheckFailed,
                "\(new.description) was installed into '\(report.destination)', but its \(why)\(tail.isEmpty ? "" : " (\(tail))"); there is no previous release to go back to, so it stays installed, recorded as bad",
                path: report.destination)
        }
        let (from, to) = try swapBack(report.destination, releases: &releases, by: "health-check", reason: why, installState: installState)
        if let command = options.hooks.postInstall {
            report.hooks.append(HookRunner.run("post-install", command, environment: environment(event: "rollback", from: from, to: to), timeout: 600))
        }
        throw SignetError(
            .healthCheckFailed,
            "\(from.description) was installed into '\(report.destination)', but its \(why)\(tail.isEmpty ? "" : " (\(tail))"); \(to.description) was swapped back and sequence \(from.sequence) is recorded as bad (not installed again; a higher sequence is)",
            path: report.destination)
    }

    /// The report a hook finds in `SIGNET_REPORT`.
    private static func reportJSON(_ report: InstallReport, from: Release?, to: Release, event: String) -> String {
        func release(_ r: Release?) -> Any { r.map { ["name": $0.name, "version": $0.version, "sequence": $0.sequence] as [String: Any] } ?? NSNull() }
        let object: [String: Any] = [
            "event": event, "destination": report.destination, "old": release(from), "new": release(to),
            "files": report.files.count, "files_shared": report.filesShared, "pending": report.pending,
            "previous_kept": report.previousKept
        ]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// Swaps the previous release back into `destination` (the caller holds its lock), once it
    /// verified: its manifest is the one the record pinned when it was installed, and every file
    /// is as that manifest says (content, mode, nothing added or missing). The release swapped
    /// out is removed and recorded as bad.
    static func swapBack(
        _ destination: String, releases: inout ReleaseRecord, by: String, reason: String,
        installState: InstallState?
    ) throws -> (from: Release, to: Release) {
        guard case .installed(let current?) = try inspectForRollback(destination) else {
            throw SignetError(
                .rollbackRefused, "'\(destination)' holds no release installed from a signed package; nothing to roll back from", path: destination)
        }
        let previousPath = ReleaseRecord.previousPath(for: destination)
        guard let info = try Paths.lstatIfPresent(previousPath) else {
            throw SignetError(
                .rollbackRefused,
                "no previous release is kept beside '\(destination)' (the first install, --keep-previous=no, an unconfirmed release replaced, or a rollback already made); \(Release(current).description) stays installed",
                path: destination)
        }
        guard info.st_mode & S_IFMT == S_IFDIR, info.st_uid == geteuid(), info.st_mode & 0o022 == 0 else {
            throw SignetError(
                .rollbackRefused, "'\(previousPath)' is not a directory of this user's that only it may write; it is not rolled back to", path: previousPath)
        }
        let previous = try PreviousTree.verify(
            previousPath, pinned: releases.previous_manifest_sha256, signer: releases.previous_signer, destination: destination)
        let (directory, name) = (AtomicFile.parentDirectory(of: destination), destination.split(separator: "/").last.map(String.init) ?? destination)
        let parent = try openDirectory(directory, what: "the directory")
        let previousName = previousPath.split(separator: "/").last.map(String.init)!
        let (from, to) = (Release(current), Release(previous.manifest))
        // The state file first: from here it records no later release than DIR holds, as after
        // an install, so a power cut at any later step leaves it consistent with DIR (a DIR
        // still holding `from` is simply a higher release than recorded).
        try installState?.record(rollbackOf: destination, to: to, from: from.sequence)
        let swapped = try TemporaryFiles.guarded {
            signet_renameat2(parent.descriptor.rawValue, previousName, parent.descriptor.rawValue, name, signet_RENAME_EXCHANGE()) == 0
        }
        guard swapped else {
            let failure = SignetError.posix(errno, "cannot swap the previous release back into", path: destination, call: "renameat2")
            // DIR still holds `from`: so does the state again.
            try? installState?.record(from.name, sequence: from.sequence, destination: destination)
            throw failure
        }
        try? parent.descriptor.sync()
        // Recorded before the release swapped out (now at the previous release's name) is
        // removed: a crash while it is removed leaves a record that already names no previous
        // release, and the next install replaces what is left of it.
        releases.markBad(from.name, sequence: from.sequence, reason: reason)
        releases.current_manifest_sha256 = previous.digest
        releases.current_signer = releases.previous_signer
        releases.previous_manifest_sha256 = nil
        releases.previous_signer = nil
        releases.pending = nil
        releases.unchecked = nil
        releases.last_rollback = .init(from: from.sequence, to: to.sequence, by: by, at: Timestamp.now.rfc3339)
        try releases.write(for: destination)
        _ = TreeRemover.removeEntry(Array(previousName.utf8CString), in: parent.descriptor)
        try? parent.descriptor.sync()
        return (from, to)
    }

    /// DIR's state for a rollback: a DIR Signet did not install is refused as such, without
    /// the `--force` of unpack's message (rollback has none).
    static func inspectForRollback(_ destination: String) throws -> DestinationState {
        do {
            return try DestinationState.inspect(destination, force: false)
        } catch let error as SignetError where error.code == .destinationRefused || error.code == .relabelledTree {
            throw SignetError(
                .rollbackRefused,
                "'\(destination)' holds no release Signet installed (no readable .signet/manifest.json): there is nothing to roll back; check the path",
                path: destination)
        }
    }

    static func openDirectory(_ path: String, what: String) throws -> OwnedDescriptor {
        do { return try Paths.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) } catch {
            throw SignetError.posix(error, "cannot open \(what)", path: path)
        }
    }

    /// `signet rollback DIR`: swaps the kept previous release back (FORMAT.md §2, "The previous
    /// release"), after verifying it; the release swapped out is recorded as bad.
    ///
    /// Throws ``/SignetCore/SignetError``: `.rollbackRefused` (exit 1) when there is no previous release or
    /// it no longer verifies (DIR unchanged); `.destinationBusy` (exit 5).
    public static func rollback(_ destination: String, options: RollbackOptions = RollbackOptions()) throws -> RollbackReport {
        let destination = try normalizedDestination(destination)
        let lock = try DestinationLock(destination, wait: options.wait)
        defer { lock.release() }
        var releases = try ReleaseRecord.read(for: destination)
        var by = "owner", reason = "rolled back by its owner (signet rollback)"
        if options.bootCheck {
            guard case .installed(let current?) = try inspectForRollback(destination),
                let pending = releases.pending, pending.sequence == current.sequence
            else {
                return RollbackReport(from: nil, to: nil, skipped: "no release of '\(destination)' waits to be confirmed")
            }
            guard pending.boot_id != (try ReleaseRecord.bootID()) else {
                return RollbackReport(from: nil, to: nil, skipped: "\(Release(current).description) waits to be confirmed since \(pending.since), in this boot")
            }
            (by, reason) = ("boot-check", "not confirmed before the machine restarted (installed pending \(pending.since))")
        }
        let installState = try options.stateFile.map { try InstallState(path: $0) }
        let (from, to) = try swapBack(destination, releases: &releases, by: by, reason: reason, installState: installState)
        var report = RollbackReport(from: from, to: to, skipped: nil)
        if let command = options.postInstall {
            var environment = [
                "SIGNET_EVENT": "rollback", "SIGNET_DEST": destination, "SIGNET_PENDING": "0",
                "SIGNET_NEW_NAME": to.name, "SIGNET_NEW_VERSION": to.version, "SIGNET_NEW_SEQUENCE": String(to.sequence),
                "SIGNET_OLD_NAME": from.name, "SIGNET_OLD_VERSION": from.version, "SIGNET_OLD_SEQUENCE": String(from.sequence)
            ]
            let object: [String: Any] = [
                "event": "rollback", "destination": destination, "by": by,
                "old": ["name": from.name, "version": from.version, "sequence": from.sequence],
                "new": ["name": to.name, "version": to.version, "sequence": to.sequence]
            ]
            environment["SIGNET_REPORT"] = String(
                decoding: (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data(), as: UTF8.self)
            report.hooks.append(HookRunner.run("post-install", command, environment: environment, timeout: 600))
        }
        return report
    }

    /// `signet confirm DIR`: the pending release is good; it stays installed across reboots.
    /// Returns the release confirmed, or nil when none was pending. A DIR that holds no release
    /// Signet installed (a mistyped path) is refused (`.notInstalled`) before anything is made
    /// beside it: "nothing to confirm" there would let the next boot roll the real one back.
    public static func confirm(_ destination: String, wait: Double = 10) throws -> Release? {
        let destination = try normalizedDestination(destination)
        guard case .installed(_?) = try DestinationState.inspect(destination, force: true) else {
            throw SignetError(
                .notInstalled,
                "'\(destination)' holds no release installed by Signet (no signed .signet/manifest.json), so there is nothing there to confirm: is the path the DIR the release was installed to?",
                path: destination)
        }
        let lock = try DestinationLock(destination, wait: wait)
        defer { lock.release() }
        var releases = try ReleaseRecord.read(for: destination)
        guard let pending = releases.pending, case .installed(let current?) = try DestinationState.inspect(destination, force: false),
            pending.sequence == current.sequence
        else { return nil }
        releases.pending = nil
        try releases.write(for: destination)
        return Release(current)
    }

    /// `signet status DIR`: the installed release, the one kept for a rollback, whether the
    /// current one waits to be confirmed, and the releases refused as bad. Informational: the
    /// trees' manifests are read, not verified (`reverify` verifies).
    public static func status(of destination: String) throws -> DestinationStatus {
        let destination = try normalizedDestination(destination)
        let releases = try ReleaseRecord.read(for: destination)
        var current: Release? = nil
        if case .installed(let manifest?) = try DestinationState.inspect(destination, force: true) { current = Release(manifest) }
        // The previous release as the record pins it (a tree there that is not pinned is what a
        // crash left while removing it, replaced by the next install).
        let previousManifest =
            releases.previous_manifest_sha256 == nil
            ? nil
            : try? readSmallFile(ReleaseRecord.previousPath(for: destination) + "/" + TreeLayout.manifest, what: "previous manifest", limit: 64 << 20)
        let previous = previousManifest.flatMap { try? Manifest.parse($0) }.map(Release.init)
        let pending = releases.pending.flatMap { $0.sequence == current?.sequence ? $0.since : nil }
        var status = DestinationStatus(
            destination: destination, current: current, previous: previous, pendingSince: pending,
            bad: releases.bad.sorted { $0.key < $1.key }.map { ($0.key, $0.value.sequence, $0.value.reason, $0.value.at, $0.value.sequences) },
            lastRollback: releases.last_rollback.map { ($0.from, $0.to, $0.by, $0.at) })
        status.unchecked = current != nil && releases.unchecked == current?.sequence
        status.postInstallUnfinished = releases.post_install.flatMap { $0.sequence == current?.sequence ? $0.since : nil }
        status.channel = releases.channel.map { ($0.sequence, $0.version, $0.note, $0.at) }
        return status
    }

    /// Records beside DIR what an update found on its channel and did not install, and why
    /// (nil: nothing held back), under DIR's lock: what `status DIR` shows. Written
    /// only when it changes; a DIR with no release installed by Signet gets no record.
    public static func noteChannel(_ destination: String, sequence: UInt64, version: String, note: String?, wait: Double = 10) throws {
        let destination = try normalizedDestination(destination)
        let lock = try DestinationLock(destination, wait: wait)
        defer { lock.release() }
        try noteChannel(destination, sequence: sequence, version: version, note: note, records: ReleaseRecord.read(for: destination), holding: lock)
    }

    /// The same under DIR's lock, already held, with the records read under it.
    package static func noteChannel(
        _ destination: String, sequence: UInt64, version: String, note: String?, records: ReleaseRecord,
        holding lock: DestinationLock
    ) throws {
        var releases = records
        guard releases.current_manifest_sha256 != nil else { return }
        var wanted: ReleaseRecord.ChannelNote? = nil
        if let note {
            // The same note keeps the time it was first seen.
            let same = releases.channel.map { $0.note == note && $0.sequence == sequence } ?? false
            wanted = .init(sequence: sequence, version: version, note: note, at: same ? releases.channel!.at : Timestamp.now.rfc3339)
        }
        guard wanted != releases.channel else { return }
        releases.channel = wanted
        try releases.write(for: destination)
    }
}

// MARK: Swift-native forms: FilePath paths

extension Installer {
    /// ``rollback(_:options:)-(String,_)`` with a `FilePath`.
    public static func rollback(_ destination: FilePath, options: RollbackOptions = RollbackOptions()) throws -> RollbackReport {
        try rollback(destination.string, options: options)
    }

    /// ``confirm(_:wait:)-(String,_)`` with a `FilePath`.
    public static func confirm(_ destination: FilePath, wait: Double = 10) throws -> Release? {
        try confirm(destination.string, wait: wait)
    }

    /// ``status(of:)-(String)`` with a `FilePath`.
    public static func status(of destination: FilePath) throws -> DestinationStatus {
        try status(of: destination.string)
    }
}
