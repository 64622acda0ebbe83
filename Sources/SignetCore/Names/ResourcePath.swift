import Foundation

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
        if let refusal = bytes.withUnsafeBufferPointer(refusal(ofValidUTF8:)) { return .failure(refusal) }
        return .success(path)
    }

    /// Longest resource path, in UTF-8 bytes: its signature entry `.signet/sigs/PATH.sig` must
    /// itself be a valid name (`sigs/PATH.sig` within ``maximumLength``).
    public static let maximumResourceLength = maximumLength - TreeLayout.signature(of: "").utf8.count + (TreeLayout.directory + "/").utf8.count

    /// Checks a resource path: ``validate(_:)``, and short enough for its signature entry.
    public static func validateResource(_ path: String) -> Result<String, Refusal> {
        if path.utf8.count > maximumResourceLength {
            return .failure(
                Refusal(
                    "the path is \(path.utf8.count) bytes; resource paths may have at most \(maximumResourceLength), so that \(TreeLayout.signature(of: "PATH")) fits the \(maximumLength)-byte name limit"
                ))
        }
        return validate(path)
    }

    /// Checks a path given as a String.
    public static func validate(_ path: String) -> Result<String, Refusal> {
        var path = path
        let count = path.utf8.count
        guard count > 0 else { return .failure(Refusal("the name is empty")) }
        guard count <= maximumLength else {
            return .failure(Refusal("the name is \(count) bytes; at most \(maximumLength) are allowed"))
        }
        // A String is valid UTF-8 already: the byte rules are checked in place, without a copy.
        if let refusal = path.withUTF8(refusal(ofValidUTF8:)) { return .failure(refusal) }
        return .success(path)
    }

    /// The rules after UTF-8 validity, over the bytes in place (a 50,000-file manifest checks
    /// 50,000 paths): first the characters, then the components.
    private static func refusal(ofValidUTF8 bytes: UnsafeBufferPointer<UInt8>) -> Refusal? {
        var previous: UInt8 = 0
        for byte in bytes {
            if byte == 0 { return Refusal("the name contains a NUL character") }
            if byte < 0x20 || byte == 0x7f {
                return Refusal("the name contains a control character (U+\(String(byte, radix: 16, uppercase: true)))")
            }
            // U+0080...U+009F are C2 80...C2 9F in UTF-8 (C2 is always a lead byte in valid UTF-8).
            if previous == 0xC2, (0x80...0x9f).contains(byte) {
                return Refusal("the name contains a control character (U+\(String(byte, radix: 16, uppercase: true)))")
            }
            if byte == 0x5c { return Refusal("the name contains a backslash") }
            previous = byte
        }
        guard bytes.first != UInt8(ascii: "/") else { return Refusal("the name is an absolute path") }
        let dot = UInt8(ascii: ".")
        var start = 0
        var first = true
        for end in 0...bytes.count where end == bytes.count || bytes[end] == UInt8(ascii: "/") {
            let length = end - start
            if length == 0 { return Refusal("the name has an empty path component (// or a trailing /)") }
            if length == 1, bytes[start] == dot { return Refusal("the name has a '.' component") }
            if length == 2, bytes[start] == dot, bytes[start + 1] == dot { return Refusal("the name has a '..' component") }
            if length > maximumComponentLength {
                return Refusal("a path component is \(length) bytes; at most \(maximumComponentLength) are allowed")
            }
            if first, UnsafeBufferPointer(rebasing: bytes[start..<end]).elementsEqual(TreeLayout.directory.utf8) {
                return Refusal("resources may not live under .signet/")
            }
            first = false
            start = end + 1
        }
        return nil
    }

    /// Why a path is refused.
    public struct Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// The reason, for a person.
        public let reason: String
        init(_ reason: String) { self.reason = reason }
        public var description: String { reason }
    }

    /// Orders paths by the bytes of their UTF-8 encoding (FORMAT.md's reproducible order).
    /// Compared with `memcmp` over the strings' own storage: the generic comparison of two
    /// UTF-8 views was 12% of a 10,000-file tree check's instructions (callgrind).
    package static func byteOrder(_ lhs: String, _ rhs: String) -> Bool { byteComparison(lhs, rhs) < 0 }

    /// The order of ``byteOrder(_:_:)`` as a sign, and 0 for the same bytes: one comparison
    /// where a merge needs both "before" and "equal".
    package static func byteComparison(_ lhs: String, _ rhs: String) -> Int {
        let fast = lhs.utf8.withContiguousStorageIfAvailable { left in
            rhs.utf8.withContiguousStorageIfAvailable { right in compareBytes(left, right) }
        }
        if let fast = fast ?? nil { return fast }
        if lhs.utf8.elementsEqual(rhs.utf8) { return 0 }
        return lhs.utf8.lexicographicallyPrecedes(rhs.utf8) ? -1 : 1
    }
}

extension ResourcePath {
    /// Whether the glob `pattern` selects the resource `path`, with the rules people know from
    /// `.gitignore` (FORMAT.md §4, "Patterns"):
    /// - `*`, `?` and `[...]` match within one path component: `*` never crosses a `/`;
    /// - `**` as a whole component matches any number of folders (`a/**/b`, `**/x`, `a/**`);
    /// - a pattern without a `/` (other than a trailing one) matches a file or folder name at
    ///   any depth ("*.log", "cache");
    /// - a pattern with a `/` is anchored at the root of the tree ("config/*.json" matches
    ///   `config/app.json`, not `config/mod/app.json`); a leading `/` only anchors;
    /// - a pattern that matches a folder selects everything below it; a trailing `/` is
    ///   ignored.
    package static func matches(pattern raw: String, _ path: String) -> Bool {
        var pattern = Substring(raw)
        while pattern.count > 1, pattern.hasSuffix("/") { pattern = pattern.dropLast() }
        let anchored = pattern.dropFirst().contains("/") || pattern.hasPrefix("/")
        if pattern.hasPrefix("/") { pattern = pattern.drop { $0 == "/" } }
        let parts = pattern.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        let components = path.split(separator: "/").map(String.init)
        guard !parts.isEmpty else { return false }
        if !anchored {
            // A name: the file's or any folder's on the path.
            return components.contains { fnmatch(parts[0], $0, 0) == 0 }
        }
        // The whole path, or a folder on it (which selects what is below).
        return matchesPrefix(parts, components)
    }

    /// Whether the pattern components match the first k ≥ 1 path components, for some k, `**`
    /// matching zero or more of them. A table of (pattern, path) positions filled from the end:
    /// at most parts × components `fnmatch` calls, whatever the number of `**` (recursion over
    /// them is exponential on a deep tree).
    private static func matchesPrefix(_ parts: [String], _ components: [String]) -> Bool {
        let m = parts.count, n = components.count
        guard n > 0 else { return false }
        // next[j]: parts[i+1...] matches a prefix of components[j...] that ends at or after the
        // first component (j ≥ 1 means at least one component was consumed before).
        var next = (0...n).map { $0 >= 1 }
        for i in stride(from: m - 1, through: 0, by: -1) {
            var current = [Bool](repeating: false, count: n + 1)
            for j in stride(from: n, through: 0, by: -1) {
                if parts[i] == "**" {
                    current[j] = next[j] || (j < n && current[j + 1])
                } else {
                    current[j] = j < n && next[j + 1] && fnmatch(parts[i], components[j], 0) == 0
                }
            }
            next = current
        }
        return next[0]
    }
}

/// Byte-wise order of two byte strings (unsigned, as `memcmp`; a prefix comes first): the order
/// of ``ResourcePath/byteOrder(_:_:)``.
package func compareBytes(_ a: UnsafeBufferPointer<UInt8>, _ b: UnsafeBufferPointer<UInt8>) -> Int {
    let common = min(a.count, b.count)
    if common > 0, let left = a.baseAddress, let right = b.baseAddress {
        let order = memcmp(left, right, common)
        if order != 0 { return Int(order) }
    }
    return a.count - b.count
}
