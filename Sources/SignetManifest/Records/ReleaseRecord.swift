import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetCore
import SignetCrypto

/// What Signet knows of the releases of one destination beyond the tree itself:
/// `.DIR.signet-release` beside DIR, written atomically under DIR's lock (FORMAT.md §2, "The
/// previous release"). The previous release itself is the tree `.DIR.signet-previous`; this
/// record pins it to the manifest that verified when it was installed, says whether the
/// current release still waits to be confirmed, and which releases were refused as bad.
///
/// Format `signet-release/1`: `{"format": "signet-release/1", "current_manifest_sha256": HEX,
/// "previous_manifest_sha256": HEX|absent, "current_signer": BASE64|absent, "previous_signer":
/// BASE64|absent, "pending": {"sequence": N, "boot_id": ID, "since":
/// TIME}|absent, "unchecked": N|absent, "bad": {NAME: {"sequence": N, "reason": TEXT, "at": TIME}}, "last_rollback":
/// {"from": N, "to": N, "by": "owner"|"health-check"|"boot-check", "at": TIME}|absent,
/// "channel": {"sequence": N, "version": TEXT, "note": TEXT, "at": TIME}|absent}`.
package struct ReleaseRecord: Codable, Equatable {
    package var format = "signet-release/1"

    /// An empty record: what a destination with no record reads as.
    package init() {}
    /// The SHA-256 of the installed tree's manifest, as verified when it was installed.
    package var current_manifest_sha256: String? = nil
    /// The same for the kept previous release.
    package var previous_manifest_sha256: String? = nil
    /// The public key (base64 DER SubjectPublicKeyInfo) that verified the installed and the
    /// kept previous release's manifests when they were installed: a rollback re-verifies the
    /// previous tree with it, as `reverify` would. Absent in older records.
    package var current_signer: String? = nil
    package var previous_signer: String? = nil
    package var pending: Pending? = nil
    /// The sequence whose health check has not passed yet: it was started and its process
    /// killed (or the machine lost power) before it ended. The next run with a health check
    /// runs it again, though DIR is up to date.
    package var unchecked: UInt64? = nil
    package var bad: [String: Bad] = [:]
    package var last_rollback: Rollback? = nil
    /// What the last `update` found on the channel and did not install, and why
    /// (waiting for its wave, halted, held, locked, outside the window, not now); or that the
    /// release DIR holds was halted. Cleared by the next install and when nothing is held back.
    package var channel: ChannelNote? = nil
    /// A post-install command started for `sequence` and not seen to finish: Signet was killed
    /// while it ran. The next run ends its process group if it still lives (the same
    /// process: pid and start time), and runs the command again; `status DIR` shows it.
    package var post_install: HookRun? = nil

    package struct HookRun: Codable, Equatable {
        package var sequence: UInt64
        /// The hook's pid, which is its process group, and its start time in clock ticks after
        /// boot (`/proc/PID/stat`, field 22), in this boot (nil: not started yet).
        package var pid: Int32?
        package var start_ticks: UInt64?
        package var boot_id: String
        package var since: String

        package init(sequence: UInt64, pid: Int32?, start_ticks: UInt64?, boot_id: String, since: String) {
            self.sequence = sequence
            self.pid = pid
            self.start_ticks = start_ticks
            self.boot_id = boot_id
            self.since = since
        }
    }

    package struct ChannelNote: Codable, Equatable {
        package var sequence: UInt64
        package var version: String
        package var note: String
        package var at: String

        package init(sequence: UInt64, version: String, note: String, at: String) {
            (self.sequence, self.version, self.note, self.at) = (sequence, version, note, at)
        }
    }

    /// An installed release not yet confirmed (`--pending`).
    package struct Pending: Codable, Equatable {
        package var sequence: UInt64
        /// The boot it was installed in (`/proc/sys/kernel/random/boot_id`): a later boot
        /// without a confirmation rolls it back (`rollback --boot-check`).
        package var boot_id: String
        package var since: String

        package init(sequence: UInt64, boot_id: String, since: String) {
            (self.sequence, self.boot_id, self.since) = (sequence, boot_id, since)
        }
    }

    /// The highest release of a name refused as bad: that sequence and lower ones are not
    /// installed again (only a higher one is).
    package struct Bad: Codable, Equatable {
        package var sequence: UInt64
        package var reason: String
        package var at: String
        /// Each sequence refused, every one a release that was installed here and then rolled
        /// back or failed its health check (a range would also refuse releases never
        /// installed). Nil in a record written before: then every sequence from `sequence` down
        /// to the one DIR holds.
        package var sequences: [UInt64]? = nil

        package init(sequence: UInt64, reason: String, at: String, sequences: [UInt64]? = nil) {
            (self.sequence, self.reason, self.at, self.sequences) = (sequence, reason, at, sequences)
        }
    }

    package struct Rollback: Codable, Equatable {
        package var from: UInt64
        package var to: UInt64
        package var by: String
        package var at: String

        package init(from: UInt64, to: UInt64, by: String, at: String) {
            (self.from, self.to, self.by, self.at) = (from, to, by, at)
        }
    }

    /// `.DIR.signet-release`.
    package static func path(for destination: String) -> String {
        let (directory, prefix) = TemporaryFiles.prefix(besides: destination)
        return directory + "/" + prefix + "release"
    }

    /// `.DIR.signet-previous`.
    package static func previousPath(for destination: String) -> String {
        let (directory, prefix) = TemporaryFiles.prefix(besides: destination)
        return directory + "/" + prefix + "previous"
    }

    /// The record beside `destination`; an empty one when there is none. A record another user
    /// could have written is refused: it says which releases may be installed.
    package static func read(for destination: String) throws -> ReleaseRecord {
        let path = path(for: destination)
        guard let info = try Paths.lstatIfPresent(path) else { return ReleaseRecord() }
        // Root's record is trusted by every user (root can do anything anyway): a user reading
        // the state of a tree root installed is told so, not asked to remove Signet's files.
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid() || info.st_uid == 0, info.st_mode & 0o022 == 0 else {
            throw SignetError(
                .insecureFile,
                "the release record '\(path)' is not a regular file of this user's (or root's) that only its owner may write (uid \(info.st_uid), mode \(String(info.st_mode & 0o7777, radix: 8))); it says which releases may be installed, so it is not trusted. Remove it if it is not Signet's",
                path: path)
        }
        let file: InputFile
        do {
            file = try InputFile.open(path, what: "release record", followSymlinks: false)
        } catch let error as SignetError where error.code == .permissionDenied {
            throw SignetError(
                .permissionDenied,
                "the release record '\(path)' belongs to uid \(info.st_uid) and this user (uid \(geteuid())) may not read it: run this as the user that installs '\(destination)' (root, for the system's update service)",
                path: path)
        }
        let bytes = try file.readAll(limit: 1 << 20, what: "release record")
        guard (try? StrictJSON.check(bytes, integersOnly: true)) != nil,
            let record = try? JSONDecoder().decode(ReleaseRecord.self, from: Data(bytes)), record.format == "signet-release/1"
        else {
            throw SignetError(
                .malformedInput,
                "the release record '\(path)' is not a signet-release/1 document; restore it or remove it (the bad releases and the pending confirmation it records are then forgotten)",
                path: path)
        }
        return record
    }

    /// Writes the record atomically (under DIR's lock).
    package func write(for destination: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        try AtomicFile.write(Array(try encoder.encode(self)) + [UInt8(ascii: "\n")], to: Self.path(for: destination), mode: 0o644, replace: true)
    }

    /// This boot's id (`/proc/sys/kernel/random/boot_id`). Refused rather than guessed when
    /// it cannot be read (a sandbox with `ProcSubset=pid` hides it): a wrong id would make the
    /// boot check roll back a release in the boot it was installed in, or never.
    package static func bootID() throws -> String {
        let path = "/proc/sys/kernel/random/boot_id"
        let bytes: [UInt8]
        do { bytes = try InputFile.open(path, what: "boot id").readAll(limit: 128, what: "boot id") } catch let error as SignetError {
            throw SignetError(
                .io,
                "cannot read this boot's id from \(path) (\(error.reason)); a pending release and the boot check need it. Under systemd, do not set ProcSubset=pid",
                path: path)
        }
        let id = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard id.count >= 16 else {
            throw SignetError(.io, "\(path) holds no boot id ('\(id)'); a pending release and the boot check need it", path: path)
        }
        return id
    }

    /// Whether `sequence` of `name` was refused as bad: the bad sequence and those below it,
    /// down to the one DIR holds (`installed`), which stays installable.
    package func isBad(_ name: String, sequence: UInt64, installed: UInt64?) -> Bad? {
        guard let bad = bad.first(where: { Manifest.sameName($0.key, name) })?.value else { return nil }
        if let refused = bad.sequences { return refused.contains(sequence) ? bad : nil }
        guard sequence <= bad.sequence, sequence > installed ?? 0 || installed == nil else { return nil }
        return bad
    }

    /// Records `sequence` of `name` (a release that was installed here) as refused; the
    /// sequences refused before stay refused, and no other one is (at most the last 64).
    package mutating func markBad(_ name: String, sequence: UInt64, reason: String) {
        let key = bad.keys.first(where: { Manifest.sameName($0, name) }) ?? name
        let known = bad[key]
        var refused = known.map { $0.sequences ?? [$0.sequence] } ?? []
        if !refused.contains(sequence) { refused.append(sequence) }
        refused = Array(refused.sorted().suffix(64))
        // The highest refused sequence, and why it was refused.
        if let known, known.sequence > sequence {
            bad[key] = Bad(sequence: known.sequence, reason: known.reason, at: known.at, sequences: refused)
        } else {
            bad[key] = Bad(sequence: sequence, reason: reason, at: Timestamp.now.rfc3339, sequences: refused)
        }
    }
}
