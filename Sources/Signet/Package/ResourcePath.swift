/// The rules FORMAT.md §2 sets for resource paths inside a package, applied when packing and
/// (to every entry name of an untrusted archive) when reading.
public enum ResourcePath {
    /// Longest path, in UTF-8 bytes.
    public static let maximumLength = 4096
    /// Longest path component, in UTF-8 bytes.
    public static let maximumComponentLength = 255

    /// Checks raw entry-name bytes. Returns the path as a String, or the reason it is refused.
    public static func validate(bytes: [UInt8]) -> Result<String, Refusal> {
        guard !bytes.isEmpty else { return .failure(Refusal("the name is empty")) }
        guard bytes.count <= maximumLength else {
            return .failure(Refusal("the name is \(bytes.count) bytes; at most \(maximumLength) are allowed"))
        }
        guard let path = String(validating: bytes, as: UTF8.self) else {
            return .failure(Refusal("the name is not valid UTF-8"))
        }
        for scalar in path.unicodeScalars {
            let value = scalar.value
            if value == 0 { return .failure(Refusal("the name contains a NUL character")) }
            if value < 0x20 || (0x7f...0x9f).contains(value) {
                return .failure(Refusal("the name contains a control character (U+\(String(value, radix: 16, uppercase: true)))"))
            }
            if value == 0x5c { return .failure(Refusal("the name contains a backslash")) }
        }
        guard bytes.first != UInt8(ascii: "/") else { return .failure(Refusal("the name is an absolute path")) }
        let components = bytes.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
        for component in components {
            if component.isEmpty { return .failure(Refusal("the name has an empty path component (// or a trailing /)")) }
            if component.elementsEqual([UInt8(ascii: ".")]) { return .failure(Refusal("the name has a '.' component")) }
            if component.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) { return .failure(Refusal("the name has a '..' component")) }
            if component.count > maximumComponentLength {
                return .failure(Refusal("a path component is \(component.count) bytes; at most \(maximumComponentLength) are allowed"))
            }
        }
        if components.first.map({ $0.elementsEqual(Array(TreeLayout.directory.utf8)) }) == true {
            return .failure(Refusal("resources may not live under .signet/"))
        }
        return .success(path)
    }

    /// Longest resource path, in UTF-8 bytes: its signature entry `.signet/sigs/PATH.sig` must
    /// itself be a valid name (`sigs/PATH.sig` within ``maximumLength``).
    public static let maximumResourceLength = maximumLength - TreeLayout.signature(of: "").utf8.count + (TreeLayout.directory + "/").utf8.count

    /// Checks a resource path: ``validate(_:)``, and short enough for its signature entry.
    public static func validateResource(_ path: String) -> Result<String, Refusal> {
        if path.utf8.count > maximumResourceLength {
            return .failure(Refusal("the path is \(path.utf8.count) bytes; resource paths may have at most \(maximumResourceLength), so that \(TreeLayout.signature(of: "PATH")) fits the \(maximumLength)-byte name limit"))
        }
        return validate(path)
    }

    /// Checks a path given as a String.
    public static func validate(_ path: String) -> Result<String, Refusal> {
        validate(bytes: Array(path.utf8))
    }

    /// Why a path is refused.
    public struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// The reason, for a person.
        public let reason: String
        init(_ reason: String) { self.reason = reason }
        public var description: String { reason }
    }

    /// Orders paths by the bytes of their UTF-8 encoding (FORMAT.md's reproducible order).
    static func byteOrder(_ lhs: String, _ rhs: String) -> Bool {
        lhs.utf8.lexicographicallyPrecedes(rhs.utf8)
    }
}
