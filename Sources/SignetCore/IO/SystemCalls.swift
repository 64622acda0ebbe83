#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
package import SystemPackage

// The one POSIX layer. Reads, writes and descriptors go through swift-system's `FileDescriptor`
// (EINTR retried, failures as a typed `Errno`); the calls swift-system lacks (openat, fstatat,
// renameat2, the xattr calls, fdopendir) go through `systemCall`, which reads errno right after
// the call, never later. Either way a failure reaches the user as a `SignetError` that names the
// failing call and its errno (`SignetError.posix(_:_:path:)`).

/// A system call that failed: its name and the errno it set.
@usableFromInline
package struct SystemCallFailure: Error {
    let call: String
    package let errno: Errno

    package init(_ call: String, _ errno: Errno) {
        self.call = call
        self.errno = errno
    }

    /// From an errno value.
    @usableFromInline
    package init(_ call: String, code: Int32) {
        self.init(call, Errno(rawValue: code))
    }

    /// From what a swift-system call threw (always an `Errno`).
    init(_ call: String, _ error: any Error) {
        self.init(call, error as? Errno ?? Errno(rawValue: EIO))
    }

    /// The errno value itself, for the checks that tell ENOENT from the rest.
    package var code: Int32 { errno.rawValue }
}

/// Runs a C call that returns -1 and sets errno on failure: retries it on EINTR and throws the
/// errno it set, with the call's name. Any other result is returned as it is.
/// Inlinable: it wraps every system call of every layer above the core (several per file), and a
/// generic called across modules unspecialized costs more than the wrapper itself.
@inlinable @inline(__always)
package func systemCall<T: FixedWidthInteger>(_ name: String, _ body: () -> T) throws(SystemCallFailure) -> T {
    while true {
        let result = body()
        guard result == -1 else { return result }
        let err = Glibc.errno
        if err == EINTR { continue }
        throw SystemCallFailure(name, code: err)
    }
}

/// Repeats a C call while it fails with EINTR. For calls whose failure is reported through
/// errno by the caller right after (`Paths.open`, best-effort calls).
@inlinable @inline(__always)
package func retryingOnEINTR<T: FixedWidthInteger>(_ call: () -> T) -> T {
    while true {
        let result = call()
        if result == -1 && errno == EINTR { continue }
        return result
    }
}

extension FileDescriptor {
    /// Reads from `offset` until `buffer` is full or the file ends; returns how many bytes it
    /// read (fewer than `buffer.count` only at the end of the file).
    package func read(fullyAt offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        var done = 0
        while done < buffer.count {
            let n: Int
            do {
                n = try read(fromAbsoluteOffset: offset + Int64(done), into: UnsafeMutableRawBufferPointer(rebasing: buffer[done...]))
            } catch {
                throw SystemCallFailure("pread", error)
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Reads the next chunk at the current position into `buffer` (0 at the end of the file).
    package func readChunk(into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        do { return try read(into: buffer) } catch { throw SystemCallFailure("read", error) }
    }

    /// Calls `body` with consecutive chunks from the current position until the end of the file,
    /// reusing one buffer of `chunkSize` bytes.
    package func forEachChunk(chunkSize: Int, _ body: (UnsafeRawBufferPointer) throws -> Void) throws {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 64)
        defer { buffer.deallocate() }
        while true {
            let count = try readChunk(into: buffer)
            if count == 0 { return }
            try body(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
        }
    }

    /// Writes all of `bytes` at the current position.
    package func write(all bytes: UnsafeRawBufferPointer) throws {
        do { try writeAll(bytes) } catch { throw SystemCallFailure("write", error) }
    }

    /// Writes all of `bytes` at `offset`, leaving the position alone.
    package func write(all bytes: UnsafeRawBufferPointer, at offset: Int64) throws {
        do { try writeAll(toAbsoluteOffset: offset, bytes) } catch { throw SystemCallFailure("pwrite", error) }
    }

    /// fsync(2).
    package func sync() throws {
        _ = try systemCall("fsync") { Glibc.fsync(rawValue) }
    }

    /// fstat(2).
    package func status() throws -> Glibc.stat {
        var info = Glibc.stat()
        let fd = rawValue
        _ = try systemCall("fstat") { fstat(fd, &info) }
        return info
    }
}

/// The one directory walker: the entries of a directory (without `.` and `..`), read through a
/// duplicate of its descriptor from the start, whatever was read from it before.
package enum DirectoryEntries {
    /// One entry: its raw name (NUL-terminated, for the `*at` calls) and the type the
    /// directory records (`DT_UNKNOWN` on filesystems that record none).
    package struct Entry {
        package let rawName: [CChar]
        let type: UInt8

        /// The name as text (invalid UTF-8 repaired), for messages and manifests.
        package var name: String { String(decoding: rawName.dropLast().map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        package var isDirectory: Bool { type == UInt8(DT_DIR) }
        package var typeUnknown: Bool { type == UInt8(DT_UNKNOWN) }
    }

    /// Calls `body` with each entry of the open directory `directory`. A read error is thrown
    /// (readdir reports it only through errno, so an unreadable directory is never taken for
    /// an empty one).
    package static func forEach(in directory: FileDescriptor, _ body: (Entry) throws -> Void) throws {
        let copy = OwnedDescriptor(adopting: try systemCall("dup") { dup(directory.rawValue) })
        guard let handle = fdopendir(copy.descriptor.rawValue) else {
            throw SystemCallFailure("fdopendir", Errno(rawValue: errno))
        }
        // The copy is the directory stream's from here: closedir closes it.
        _ = copy.take()
        defer { closedir(handle) }
        // fdopendir shares the offset with `directory`: start from the top.
        rewinddir(handle)
        while true {
            errno = 0
            guard let entry = readdir(handle) else {
                if errno != 0 { throw SystemCallFailure("readdir", Errno(rawValue: errno)) }
                return
            }
            // The name in place, up to its NUL: glibc allocates each record only as long as its
            // name, so copying `d_name` whole (256 bytes) would read past the last record.
            let namePointer = UnsafeRawPointer(entry).advanced(by: MemoryLayout<dirent>.offset(of: \dirent.d_name)!).assumingMemoryBound(to: CChar.self)
            let name = Array(UnsafeBufferPointer(start: namePointer, count: strlen(namePointer)))
            if name == [0x2e] || name == [0x2e, 0x2e] { continue }
            try body(Entry(rawName: name + [0], type: entry.pointee.d_type))
        }
    }

    /// All entries of `directory`.
    package static func list(_ directory: FileDescriptor) throws -> [Entry] {
        var entries: [Entry] = []
        try forEach(in: directory) { entries.append($0) }
        return entries
    }
}
