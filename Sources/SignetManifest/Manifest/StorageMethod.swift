#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto

/// How a zip entry's bytes are kept: the two methods a package may use.
public enum StorageMethod: String, Sendable, CustomStringConvertible {
    /// As they are (zip method 0).
    case stored
    /// Deflated (zip method 8).
    case deflated

    /// "stored" or "deflated", as printed by inspect and pack.
    public var description: String { rawValue }
}
