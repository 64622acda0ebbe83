#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetArchive

/// A package being written: a temporary file beside its final path (removed on interruption,
/// and on any failure), renamed into place only once it is whole, checked and durable. `pack`
/// and `resign` write through it.
final class PackageOutput {
    let path: String
    let temporary: String
    let archive: ArchiveOutput
    private let token: Int
    private var committed = false

    /// `what` names the package in messages ("the package", "the re-signed package").
    init(_ path: String, tag: String, what: String) throws {
        self.path = path
        // What an interrupted or killed run writing the same output left (its process is gone).
        TemporaryFiles.removeStale(besides: path)
        temporary = TemporaryFiles.name(besides: path, tag: tag)
        token = TemporaryFiles.register(temporary)
        let file: OwnedDescriptor
        do {
            file = try TemporaryFiles.guardedOpen(temporary, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        } catch let failure as SystemCallFailure {
            TemporaryFiles.unregister(token)
            throw SignetError.posix(failure, "cannot create \(what) beside", path: path)
        }
        archive = ArchiveOutput(file: file, path: path)
    }

    deinit {
        if !committed { unlink(temporary) }
        TemporaryFiles.unregister(token)
    }

    /// Makes the written package durable and renames it into place: replacing what is there only
    /// when `replace`, else refusing a file that appeared meanwhile.
    func commit(replace: Bool, what: String) throws {
        try archive.sync()
        do {
            if replace {
                _ = try TemporaryFiles.guardedCall("rename") { rename(temporary, path) }.get()
            } else {
                try TemporaryFiles.guarded { try AtomicFile.renameNoReplace(temporary, path, what: what) }
            }
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot write \(what)", path: path)
        }
        committed = true
        AtomicFile.syncDirectory(AtomicFile.parentDirectory(of: path))
    }
}
