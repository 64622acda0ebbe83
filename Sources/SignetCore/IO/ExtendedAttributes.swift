#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
package import SystemPackage

/// Extended attributes on an open file descriptor. Descriptor-based calls only: the file that
/// was opened (with O_NOFOLLOW) is the file whose attributes are read or written.
package enum ExtendedAttributes {
    /// The attribute names FORMAT.md §3 defines.
    package static let signature = TreeLayout.signatureAttribute
    package static let metadata = TreeLayout.metadataAttribute

    /// Why an attribute call failed: the call and the errno the kernel gave.
    package typealias Failure = SystemCallFailure

    /// Sets `name` to `value` with `fsetxattr(2)`, retrying on EINTR.
    package static func set(_ name: String, _ value: [UInt8], on file: FileDescriptor) -> Result<Void, Failure> {
        let status = value.withUnsafeBytes { raw in
            retryingOnEINTR { fsetxattr(file.rawValue, name, raw.baseAddress, raw.count, 0) }
        }
        return status == 0 ? .success(()) : .failure(Failure("fsetxattr", Errno(rawValue: errno)))
    }

    /// Reads `name` with `fgetxattr(2)`, growing the buffer on ERANGE; nil when absent (ENODATA).
    package static func get(_ name: String, on file: FileDescriptor) -> Result<[UInt8]?, Failure> {
        var capacity = 1024
        while capacity <= 1 << 16 {
            var count = -1
            let value = [UInt8](unsafeUninitializedCapacity: capacity) { raw, initialised in
                count = retryingOnEINTR { fgetxattr(file.rawValue, name, raw.baseAddress, raw.count) }
                initialised = max(0, count)
            }
            if count >= 0 { return .success(value) }
            switch errno {
            case ENODATA: return .success(nil)
            case ERANGE: capacity *= 4
            default: return .failure(Failure("fgetxattr", Errno(rawValue: errno)))
            }
        }
        return .failure(Failure("fgetxattr", Errno(rawValue: E2BIG)))
    }

    /// Removes `name` with `fremovexattr(2)`; removing an absent attribute succeeds.
    package static func remove(_ name: String, on file: FileDescriptor) -> Result<Void, Failure> {
        if retryingOnEINTR({ fremovexattr(file.rawValue, name) }) == 0 || errno == ENODATA { return .success(()) }
        return .failure(Failure("fremovexattr", Errno(rawValue: errno)))
    }

    /// Lists attribute names with `flistxattr(2)`, growing the buffer on ERANGE.
    package static func list(on file: FileDescriptor) -> Result<[String], Failure> {
        var capacity = 1024
        while capacity <= 1 << 20 {
            var buffer = [UInt8](repeating: 0, count: capacity)
            let count = buffer.withUnsafeMutableBytes { raw in
                retryingOnEINTR { flistxattr(file.rawValue, raw.baseAddress!.assumingMemoryBound(to: CChar.self), raw.count) }
            }
            if count >= 0 {
                return .success(buffer.prefix(count).split(separator: 0).map { String(decoding: $0, as: UTF8.self) })
            }
            guard errno == ERANGE else { return .failure(Failure("flistxattr", Errno(rawValue: errno))) }
            capacity *= 4
        }
        return .failure(Failure("flistxattr", Errno(rawValue: E2BIG)))
    }
}

extension SystemCallFailure {
    /// The filesystem has no (user) extended attributes.
    package var isUnsupported: Bool { code == ENOTSUP || code == EOPNOTSUPP }
    /// The value does not fit (ext4 keeps all of a file's attributes in one 4 KiB block).
    package var isNoRoom: Bool { code == E2BIG || code == ENOSPC || code == ERANGE }

    /// The error FORMAT.md §4 assigns (exit 5: environment), naming the file and the attribute.
    package func error(_ action: String, attribute: String, path: String) -> SignetError {
        var error = SignetError.posix(self, "cannot \(action) \(attribute) on", path: path)
        if isUnsupported {
            error.code = .io
            error.reason = "cannot \(action) \(attribute) on '\(path)': the filesystem has no user extended attributes"
        } else if isNoRoom {
            error.code = .io
            error.reason = "cannot \(action) \(attribute) on '\(path)': no room for the attribute (ext4 keeps all of a file's attributes in one 4 KiB block)"
        }
        return error
    }
}
