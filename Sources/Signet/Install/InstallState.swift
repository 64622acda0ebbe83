import Foundation
internal import SystemPackage
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `--state FILE`: the highest `sequence` installed per package `name`, across every destination
/// that uses the file, so a package cannot be rolled back by installing it somewhere else.
///
/// The file itself is locked (`flock`), from the rollback check until the new sequence is
/// recorded; no second file is left beside it. An update replaces the file atomically (a new
/// inode), so a process that was waiting for the lock checks, once it has it, that it holds the
/// file the path names now, and otherwise locks the new one.
final class InstallState {
    let path: String
    private let lock: Int32
    private(set) var sequences: [String: UInt64]

    /// Opens (creating if needed) and locks the state; blocks while another install holds it.
    init(path: String) throws {
        self.path = path
        var fd: Int32 = -1
        while true {
            do { fd = try Paths.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644) } catch {
                throw SignetError.posix(error, "cannot open install state", path: path)
            }
            let held: stat
            let named: stat?
            do {
                _ = try systemCall("flock") { flock(fd, LOCK_EX) }
                held = try FileDescriptor(fd).status()
                named = try Paths.lstatIfPresent(path)
            } catch {
                close(fd)
                throw SignetError.posix(error, "cannot lock install state", path: path)
            }
            if let named, held.st_dev == named.st_dev && held.st_ino == named.st_ino { break }
            close(fd)   // replaced while we waited: lock the file the path names now
        }
        lock = fd
        var bytes: [UInt8] = []
        do {
            try FileDescriptor(fd).forEachChunk(chunkSize: InputFile.chunkSize) { chunk in
                guard bytes.count + chunk.count <= 16 << 20 else {
                    throw SignetError(.malformedInput, "install state '\(path)' is larger than 16 MiB; it is not a state file Signet wrote", path: path)
                }
                bytes.append(contentsOf: chunk)
            }
        } catch let failure as SystemCallFailure {
            close(fd)
            throw SignetError.posix(failure, "cannot read install state", path: path)
        } catch {
            close(fd)
            throw error
        }
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x09 || $0 == 0x0D }) {
            sequences = [:]
            return
        }
        guard (try? StrictJSON.check(bytes, integersOnly: true)) != nil,
              let decoded = try? JSONDecoder().decode([String: UInt64].self, from: Data(bytes)) else {
            close(fd)
            throw SignetError(.malformedInput, "install state '\(path)' is not a JSON object of package names and sequences; restore it or remove it", path: path)
        }
        sequences = decoded
    }

    deinit {
        _ = flock(lock, LOCK_UN)
        close(lock)
    }

    /// Records `sequence` for `name` if it is higher than what is recorded.
    func record(_ name: String, sequence: UInt64) throws {
        guard sequence > sequences[name] ?? 0 || sequences[name] == nil else { return }
        sequences[name] = sequence
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
        try AtomicFile.write(Array(try encoder.encode(sequences)) + [UInt8(ascii: "\n")], to: path, mode: 0o644, replace: true)
    }
}
