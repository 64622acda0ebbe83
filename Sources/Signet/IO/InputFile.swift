#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetShims

/// A regular file opened read-only. Owns its descriptor and closes it in `deinit`.
///
/// Only regular files are accepted: a directory, FIFO or device is refused before any read,
/// so `signet sign /some/dir` gets a clear error instead of EISDIR half-way through.
final class InputFile {
    let descriptor: Int32
    let path: String
    let size: Int64
    let mode: mode_t

    /// Chunk size for streaming reads. Large enough that syscalls are noise next to SHA-256,
    /// small enough to stay in L2 cache.
    static let chunkSize = 256 * 1024

    private init(descriptor: Int32, path: String, size: Int64, mode: mode_t) {
        self.descriptor = descriptor
        self.path = path
        self.size = size
        self.mode = mode
    }

    deinit { close(descriptor) }

    /// Opens `path` for reading. `what` names the file in errors ("file to sign", "private key").
    /// `O_NONBLOCK` keeps a FIFO from blocking the open; it has no effect on regular files.
    /// With `allowPipes`, FIFOs and character devices are read too (a passphrase from
    /// `<(pass show key)` or /dev/stdin); directories never are.
    static func open(_ path: String, what: String, followSymlinks: Bool = true, allowPipes: Bool = false) throws -> InputFile {
        var flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK
        if !followSymlinks { flags |= O_NOFOLLOW }
        let fd = Paths.open(path, flags)
        guard fd >= 0 else {
            let err = errno
            if err == ELOOP && !followSymlinks {
                throw SignetError(.malformedInput, "cannot open \(what) '\(path)': it is a symbolic link, which Signet does not follow here", path: path)
            }
            throw SignetError.posix(err, "cannot open \(what)", path: path)
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let err = errno
            close(fd)
            throw SignetError.posix(err, "cannot inspect \(what)", path: path)
        }
        let type = info.st_mode & S_IFMT
        guard type == S_IFREG || (allowPipes && (type == S_IFIFO || type == S_IFCHR)) else {
            close(fd)
            let kind = type == S_IFDIR ? "a directory" : "not a regular file"
            throw SignetError(.malformedInput, "cannot use \(what) '\(path)': it is \(kind); give a regular file", path: path)
        }
        // Regular files ignore O_NONBLOCK, but clear it so the descriptor behaves as expected.
        _ = fcntl(fd, F_SETFL, O_RDONLY)
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL)
        return InputFile(descriptor: fd, path: path, size: Int64(info.st_size), mode: info.st_mode)
    }

    /// Takes ownership of a descriptor Signet opened itself (`openat`, `openat2`), refusing
    /// anything but a regular file. The descriptor is closed on failure too.
    static func adopt(_ fd: Int32, path: String, what: String) throws -> InputFile {
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let err = errno
            close(fd)
            throw SignetError.posix(err, "cannot inspect \(what)", path: path)
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw SignetError(.malformedInput, "cannot use \(what) '\(path)': it is not a regular file", path: path)
        }
        _ = fcntl(fd, F_SETFL, O_RDONLY)
        return InputFile(descriptor: fd, path: path, size: Int64(info.st_size), mode: info.st_mode)
    }

    /// Reads a small file below a directory descriptor, never through a symbolic link and never
    /// out of the directory (openat2). Nil when it is absent; a link or a non-file on the way is
    /// `.malformedInput`; any other failure is an I/O error.
    static func readBeneath(_ root: Int32, _ relative: String, rootPath: String, what: String, limit: Int) throws -> [UInt8]? {
        let fd = signet_open_beneath(root, relative, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        let path = rootPath + "/" + relative
        guard fd >= 0 else {
            switch errno {
            case ENOENT: return nil
            case ELOOP, ENOTDIR, EXDEV:
                throw SignetError(.malformedInput, "cannot use \(what) '\(path)': it, or a folder on its way, is a symbolic link or not a directory", path: path)
            default: throw SignetError.posix(errno, "cannot open \(what)", path: path)
            }
        }
        return try adopt(fd, path: path, what: what).readAll(limit: limit, what: what)
    }

    /// Calls `body` with consecutive chunks of the file until end of file, reusing one buffer.
    func forEachChunk(_ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        try Self.forEachChunk(of: descriptor, path: path, body)
    }

    /// The same for any descriptor Signet opened itself.
    static func forEachChunk(of descriptor: Int32, path: String, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.chunkSize, alignment: 64)
        defer { buffer.deallocate() }
        while true {
            let count = retryingOnEINTR { read(descriptor, buffer.baseAddress, buffer.count) }
            if count < 0 { throw SignetError.posix(errno, "cannot read", path: path) }
            if count == 0 { return }
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
    }

    /// Reads the whole file, refusing anything larger than `limit` bytes. For small inputs
    /// only (keys, signatures, passphrase files), never for resources.
    func readAll(limit: Int, what: String) throws -> [UInt8] {
        guard size <= Int64(limit) else {
            throw SignetError(.malformedInput, "\(what) '\(path)' is \(size) bytes, more than the \(limit) bytes such a file can be; check that this is the right file", path: path)
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
func readSmallFile(_ path: String, what: String, limit: Int = 1 << 20, allowPipes: Bool = false) throws -> [UInt8] {
    try InputFile.open(path, what: what, allowPipes: allowPipes).readAll(limit: limit, what: what)
}

/// Repeats a system call while it fails with EINTR.
@inline(__always)
func retryingOnEINTR<T: FixedWidthInteger>(_ call: () -> T) -> T {
    while true {
        let result = call()
        if result == -1 && errno == EINTR { continue }
        return result
    }
}
