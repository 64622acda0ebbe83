import Foundation
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto

/// `--state FILE`: the highest `sequence` installed per package `name`, across every destination
/// that uses the file, so a package cannot be rolled back by installing it somewhere else; and
/// for each destination, the package and the kind of tree installed there, so that neither
/// another product's package nor a relabelled (bare) tree can take its place (FORMAT.md §2).
///
/// The file itself is locked (`flock`), from the rollback check until the new sequence is
/// recorded; no second file is left beside it. An update replaces the file atomically (a new
/// inode), so a process that was waiting for the lock checks, once it has it, that it holds the
/// file the path names now, and otherwise locks the new one.
///
/// Format `signet-state/2`: `{"format": "signet-state/2", "packages": {NAME: SEQUENCE},
/// "destinations": {ABSOLUTE-DIR: {"name": NAME|null, "kind": "manifest"|"bare", "sequence": N|null,
/// "changed_from": NAME (only after --change-package)}}}`; a member it does not name (an
/// earlier build's `channels`) is ignored and not written back. The first format (an object of names
/// and sequences) is read as `packages` and written in the new format on the next update.
package final class InstallState {
    package let path: String
    /// The state file, locked while this lives (its `flock` ends when it closes).
    private let lock: OwnedDescriptor
    package private(set) var sequences: [String: UInt64]
    package private(set) var destinations: [String: Destination]

    /// What was installed in one destination.
    package struct Destination: Codable, Equatable {
        /// The package name (nil for a bare package).
        package var name: String?
        /// "manifest" or "bare".
        package var kind: String
        package var sequence: UInt64?
        /// The name this destination held before `--change-package` replaced it.
        package var changed_from: String?
        /// Set by a rollback (`signet rollback`, a failed health check, the boot check): the
        /// sequence rolled back from. The destination may then hold `sequence`, lower than the
        /// highest recorded for its name, without that being taken for a rollback attack.
        package var rolled_back_from: UInt64? = nil

        /// Whether this destination was rolled back on purpose to `sequence` of `name`.
        package func rolledBack(to name: String, sequence: UInt64) -> Bool {
            rolled_back_from != nil && self.sequence == sequence && Manifest.sameName(self.name, name)
        }
    }

    /// The document.
    private struct Document: Codable {
        package let format: String
        package let packages: [String: UInt64]
        package let destinations: [String: Destination]
    }

    /// A state file's contents.
    package struct Contents {
        package var sequences: [String: UInt64] = [:]
        package var destinations: [String: Destination] = [:]
    }

    /// Opens (creating if needed) and locks the state; blocks while another install holds it.
    package init(path: String) throws {
        self.path = path
        try TrustedInput.check(creating: path, what: "--state")
        let file = try Self.lockFile(path)
        let fd = file.descriptor
        var bytes: [UInt8] = []
        do {
            try fd.forEachChunk(chunkSize: InputFile.chunkSize) { chunk in
                guard bytes.count + chunk.count <= 16 << 20 else {
                    throw SignetError(.malformedInput, "install state '\(path)' is larger than 16 MiB; it is not a state file Signet wrote", path: path)
                }
                bytes.append(contentsOf: chunk)
            }
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot read install state", path: path)
        }
        let contents = try Self.parse(bytes, path: path)
        (sequences, destinations) = (contents.sequences, contents.destinations)
        lock = file
    }

    /// Opens (creating if needed) and locks the state file the path names once it is locked.
    private static func lockFile(_ path: String) throws -> OwnedDescriptor {
        while true {
            let file: OwnedDescriptor
            do { file = try Paths.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644) } catch {
                throw SignetError.posix(error, "cannot open install state", path: path)
            }
            let fd = file.descriptor
            let held: stat
            let named: stat?
            do {
                _ = try systemCall("flock") { flock(fd.rawValue, LOCK_EX) }
                held = try fd.status()
                named = try Paths.lstatIfPresent(path)
            } catch {
                throw SignetError.posix(error, "cannot lock install state", path: path)
            }
            // Replaced while we waited: lock the file the path names now.
            guard let named, held.st_dev == named.st_dev && held.st_ino == named.st_ino else { continue }
            // A state another user can write (or wrote) could lower every recorded sequence.
            guard held.st_uid == geteuid(), held.st_mode & 0o022 == 0, held.st_mode & S_IFMT == S_IFREG else {
                throw SignetError(
                    .destinationRefused,
                    "install state '\(path)' belongs to another user (uid \(held.st_uid)) or may be written by others (mode \(String(held.st_mode & 0o777, radix: 8))); a state others can change protects nothing. Keep it in a folder only this user writes, with mode 0644 or 0600",
                    path: path)
            }
            return file
        }
    }

    /// A state file's contents: strict JSON, `signet-state/2` or the first format.
    package static func parse(_ bytes: [UInt8], path: String) throws -> Contents {
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x09 || $0 == 0x0D }) { return Contents() }
        guard (try? StrictJSON.check(bytes, integersOnly: true)) != nil else {
            throw SignetError(.malformedInput, "install state '\(path)' is not strict JSON; restore it or remove it", path: path)
        }
        if let document = try? JSONDecoder().decode(Document.self, from: Data(bytes)), document.format == "signet-state/2",
            document.destinations.values.allSatisfy({ $0.kind == "manifest" || $0.kind == "bare" })
        {
            return Contents(sequences: document.packages, destinations: document.destinations)
        }
        if let decoded = try? JSONDecoder().decode([String: UInt64].self, from: Data(bytes)) {
            return Contents(sequences: decoded) // the first format
        }
        throw SignetError(
            .malformedInput,
            "install state '\(path)' is not a signet-state/2 document (nor the older object of package names and sequences); restore it or remove it",
            path: path)
    }

    /// Reads a state file without locking or creating it (`reverify --state`): it must exist.
    package static func read(_ path: String) throws -> Contents {
        try TrustedInput.check(path, what: "--state")
        let file = try InputFile.open(path, what: "install state", followSymlinks: false)
        return try parse(try file.readAll(limit: 16 << 20, what: "install state"), path: path)
    }

    /// The key a destination is recorded under: its absolute path, with its parent's links
    /// resolved (the destination itself is never a link).
    package static func key(for destination: String) -> String {
        var destination = destination
        while destination.count > 1 && destination.hasSuffix("/") { destination.removeLast() }
        let parent = AtomicFile.parentDirectory(of: destination)
        let name = destination.split(separator: "/").last.map(String.init) ?? destination
        guard let resolved = realpath(parent, nil) else { return destination }
        defer { free(resolved) }
        let base = String(cString: resolved)
        return (base == "/" ? "" : base) + "/" + name
    }

    /// What the state records for `destination`.
    package func destination(_ destination: String) -> Destination? { destinations[Self.key(for: destination)] }

    deinit {
        _ = flock(lock.descriptor.rawValue, LOCK_UN)
        // `lock` closes after this, once.
    }

    /// Records what was installed in `destination`: the package's sequence for its name if it
    /// is higher than what is recorded, and the destination's package and kind.
    package func record(_ name: String?, sequence: UInt64?, destination: String, changedFrom: String? = nil) throws {
        if let name, let sequence, sequence > sequences[name] ?? 0 || sequences[name] == nil {
            sequences[name] = sequence
        }
        let key = Self.key(for: destination)
        var entry = Destination(name: name, kind: name == nil ? "bare" : "manifest", sequence: sequence, changed_from: nil)
        entry.changed_from = changedFrom ?? (destinations[key]?.name == name ? destinations[key]?.changed_from : nil)
        destinations[key] = entry
        try write()
    }

    /// Records a rollback of `destination` to `release` (from sequence `from`): the highest
    /// sequence of its name stays recorded, so no server can push an older release.
    package func record(rollbackOf destination: String, to release: Release, from: UInt64) throws {
        let key = Self.key(for: destination)
        var entry = destinations[key] ?? Destination(name: release.name, kind: "manifest", sequence: release.sequence, changed_from: nil)
        entry.sequence = release.sequence
        entry.rolled_back_from = from
        destinations[key] = entry
        try write()
    }

    private func write() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        let document = Document(format: "signet-state/2", packages: sequences, destinations: destinations)
        try AtomicFile.write(Array(try encoder.encode(document)) + [UInt8(ascii: "\n")], to: path, mode: 0o644, replace: true)
    }
}
