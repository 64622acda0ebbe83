#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetShims

/// Extended attributes on an open file descriptor. Descriptor-based calls only: the file that
/// was opened (with O_NOFOLLOW) is the file whose attributes are read or written.
enum ExtendedAttributes {
    /// The attribute names FORMAT.md §3 defines.
    static let signature = "user.signet.sig"
    static let metadata = "user.signet.meta"

    /// Why an attribute call failed, as the kernel said it.
    struct Failure: Error {
        let errno: Int32
        /// The filesystem has no (user) extended attributes.
        var isUnsupported: Bool { errno == ENOTSUP || errno == EOPNOTSUPP }
        /// The value does not fit (ext4 keeps all of a file's attributes in one 4 KiB block).
        var isNoRoom: Bool { errno == E2BIG || errno == ENOSPC || errno == ERANGE }
    }

    /// Sets `name` to `value` with `fsetxattr(2)`, retrying on EINTR.
    static func set(_ name: String, _ value: [UInt8], on descriptor: Int32) -> Result<Void, Failure> {
        let status = value.withUnsafeBytes { raw in
            retryingOnEINTR { fsetxattr(descriptor, name, raw.baseAddress, raw.count, 0) }
        }
        return status == 0 ? .success(()) : .failure(Failure(errno: errno))
    }

    /// Reads `name` with `fgetxattr(2)`, growing the buffer on ERANGE; nil when absent (ENODATA).
    static func get(_ name: String, on descriptor: Int32) -> Result<[UInt8]?, Failure> {
        var capacity = 1024
        while capacity <= 1 << 16 {
            var buffer = [UInt8](repeating: 0, count: capacity)
            let count = buffer.withUnsafeMutableBytes { raw in
                retryingOnEINTR { fgetxattr(descriptor, name, raw.baseAddress, raw.count) }
            }
            if count >= 0 { return .success(Array(buffer.prefix(count))) }
            switch errno {
            case ENODATA: return .success(nil)
            case ERANGE: capacity *= 4
            default: return .failure(Failure(errno: errno))
            }
        }
        return .failure(Failure(errno: E2BIG))
    }
}
