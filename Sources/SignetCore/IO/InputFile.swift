#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import SystemPackage

/// A regular file opened read-only. Owns its descriptor, which closes with it.
///
/// Only regular files are accepted: a directory, FIFO or device is refused before any read,
/// so `signet sign /some/dir` gets a clear error instead of EISDIR half-way through.
package final class InputFile {
    private let owned: OwnedDescriptor
    /// The descriptor, while this file lives.
    package var descriptor: FileDescriptor { owned.descriptor }
    package let path: String
    package let size: Int64
    package let mode: mode_t

    /// Chunk size for streaming reads. Large enough that syscalls are noise next to SHA-256,
    /// small enough to stay in L2 cache.
    package static let chunkSize = 256 * 1024

    private init(_ owned: consuming OwnedDescriptor, path: String, size: Int64, mode: mode_t) {
        self.owned = owned
        self.path = path
        self.size = size
        self.mode = mode
    }

    /// Opens `path` for reading. `what` names the file in errors ("file to sign", "private key").
    /// `O_NONBLOCK` keeps a FIFO from blocking the open; it has no effect on regular files.
    /// With `allowPipes`, FIFOs and character devices are read too (a passphrase from
    /// `<(pass show key)` or /dev/stdin); directories never are.
    package static func open(_ path: String, what: String, followSymlinks: Bool = true, allowPipes: Bool = false) throws -> InputFile {
        var flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK
        if !followSymlinks { flags |= O_NOFOLLOW }
        let opened: OwnedDescriptor
        do {
            opened = try Paths.open(path, flags)
        } catch {
            if error.code == ELOOP && !followSymlinks {
                throw SignetError(.malformedInput, "cannot open \(what) '\(path)': it is a symbolic link, which Signet does not follow here", path: path)
            }
            throw SignetError.posix(error, "cannot open \(what)", path: path)
        }
        let file = try adopt(opened, path: path, what: what, allowPipes: allowPipes)
        _ = posix_fadvise(file.descriptor.rawValue, 0, 0, POSIX_FADV_SEQUENTIAL)
        return file
    }

    /// Takes ownership of a descriptor Signet opened itself (`openat`, `openat2`), refusing
    /// anything but a regular file. The descriptor is closed on failure too.
    /// With `allowPipes`, FIFOs and character devices are taken too.
    package static func adopt(_ opened: consuming OwnedDescriptor, path: String, what: String, allowPipes: Bool = false) throws -> InputFile {
        let info: stat
        do {
            info = try opened.descriptor.status()
        } catch {
            throw SignetError.posix(error, "cannot inspect \(what)", path: path)
        }
        let type = info.st_mode & S_IFMT
        guard type == S_IFREG || (allowPipes && (type == S_IFIFO || type == S_IFCHR)) else {
            let kind = type == S_IFDIR ? "a directory" : "not a regular file"
            throw SignetError(.malformedInput, "cannot use \(what) '\(path)': it is \(kind); give a regular file", path: path)
        }
        // Regular files ignore O_NONBLOCK, but clear it so the descriptor behaves as expected.
        _ = fcntl(opened.descriptor.rawValue, F_SETFL, O_RDONLY)
        return InputFile(opened, path: path, size: Int64(info.st_size), mode: info.st_mode)
    }

    /// Reads a small file below a directory descriptor, never through a symbolic link and never
    /// out of the directory (openat2). Nil when it is absent; a link or a non-file on the way is
    /// `.malformedInput`; any other failure is an I/O error.
    package static func readBeneath(_ root: FileDescriptor, _ relative: String, rootPath: String, what: String, limit: Int) throws -> [UInt8]? {
        let path = rootPath + "/" + relative
        let opened: OwnedDescriptor
        do {
            opened = try Paths.open(relative, beneath: root)
        } catch {
            switch error.code {
            case ENOENT: return nil
            case ELOOP, ENOTDIR, EXDEV:
                throw SignetError(
                    .malformedInput, "cannot use \(what) '\(path)': it, or a folder on its way, is a symbolic link or not a directory", path: path)
            default: throw SignetError.posix(error, "cannot open \(what)", path: path)
            }
        }
        return try adopt(opened, path: path, what: what).readAll(limit: limit, what: what)
    }

    /// Calls `body` with consecutive chunks of the file until end of file, reusing one buffer.
    package func forEachChunk(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        do {
            try descriptor.forEachChunk(chunkSize: Self.chunkSize, body)
        } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot read", path: path)
        }
    }

    /// Reads from `offset` until `buffer` is full or the file ends; returns the count read.
    package func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        do {
            return try descriptor.read(fullyAt: offset, into: buffer)
        } catch {
            throw SignetError.posix(error, "cannot read", path: path)
        }
    }

    /// Reads the next chunk at the current position (0 at the end of the file).
    package func readChunk(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        do {
            return try descriptor.readChunk(into: buffer)
        } catch {
            throw SignetError.posix(error, "cannot read", path: path)
        }
    }

    /// Reads the whole file, refusing anything larger than `limit` bytes. For small inputs
    /// only (keys, signatures, passphrase files), never for resources.
    package func readAll(limit: Int, what: String) throws -> [UInt8] {
        guard size <= Int64(limit) else {
            throw SignetError(
                .malformedInput, "\(what) '\(path)' is \(size) bytes, more than the \(limit) bytes such a file can be; check that this is the right file",
                path: path)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(size))
        try forEachChunk { chunk in
            guard bytes.count + chunk.count <= limit else {
                throw SignetError(.malformedInput, "\(what) '\(path)' is larger than the \(limit) bytes such a file can be", path: path)
            }
            bytes.append(contentsOf: chunk)
        }
        return bytes
    }
}

/// Reads a small file (key, signature, passphrase) in one go, with a size limit.
package func readSmallFile(_ path: String, what: String, limit: Int = 1 << 20, allowPipes: Bool = false) throws -> [UInt8] {
    try InputFile.open(path, what: what, allowPipes: allowPipes).readAll(limit: limit, what: what)
}
