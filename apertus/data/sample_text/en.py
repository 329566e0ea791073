# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""English (en) text bank of the sample corpus."""

TOPICS = {
    "travel": [
        "The night train from Zurich to Vienna leaves shortly after nine and arrives in time for breakfast.",
        "Many travellers underestimate how cold it can get on a mountain pass, even in the middle of summer.",
        "The old town is small enough to explore on foot in a single afternoon.",
        "We booked a simple guesthouse near the harbour and woke up to the sound of fishing boats.",
        "A regional rail pass is often cheaper than buying a single ticket for every journey.",
        "The ferry crossing takes about two hours, and on clear days you can see the islands from the deck.",
        "Local buses run less often on Sundays, so it is worth checking the timetable in advance.",
        "The hiking trail climbs steadily through larch forests before opening onto a wide alpine meadow.",
        "Travelling outside the peak season means fewer crowds and lower prices for accommodation.",
        "The small museum next to the station tells the story of the valley and its people.",
        "After a long day of sightseeing, we sat on the terrace and watched the sun set over the lake.",
        "It is a good idea to carry some cash, because not every mountain hut accepts cards.",
    ],
    "cooking": [
        "Knead the dough for at least ten minutes until it feels smooth and elastic.",
        "A pinch of salt brings out the sweetness of ripe tomatoes.",
        "The soup tastes even better on the second day, once the flavours have had time to blend.",
        "Toast the nuts briefly in a dry pan until they start to smell fragrant.",
        "For a lighter sauce, replace half of the cream with vegetable stock.",
        "Let the meat rest for a few minutes before slicing it, so that the juices stay inside.",
        "Fresh herbs should be added at the very end, otherwise they lose their aroma.",
        "My grandmother always baked bread on Saturday mornings, and the whole house smelled wonderful.",
        "Potatoes, onions and a little cheese are enough to make a warming meal in winter.",
        "The cake is ready when a wooden skewer pushed into the middle comes out clean.",
        "Seasonal vegetables from the market are usually fresher and cheaper than those from the supermarket.",
        "Cook the pasta in plenty of salted water and drain it while it is still slightly firm.",
    ],
    "science": [
        "Water expands when it freezes, which is why ice floats on the surface of lakes.",
        "Plants use sunlight to turn carbon dioxide and water into sugar and oxygen.",
        "The researchers measured the temperature of the glacier at several depths over three years.",
        "Light from the sun needs a little more than eight minutes to reach the earth.",
        "Vaccines train the immune system to recognise a pathogen before a real infection occurs.",
        "The experiment was repeated several times to make sure that the results were reliable.",
        "Bees tell each other where to find flowers by performing a special dance.",
        "Sound travels much faster through water than through air.",
        "The human brain contains billions of nerve cells that are connected in complex networks.",
        "Earthquakes occur when tectonic plates suddenly slip along a fault.",
        "A good scientific theory makes predictions that can be tested by observation.",
        "The new telescope allows astronomers to observe galaxies that formed soon after the big bang.",
    ],
    "local_news": [
        "The town council approved the budget for the renovation of the primary school on Tuesday evening.",
        "Construction work on the main road will continue until the end of October.",
        "More than two hundred volunteers helped to clean the riverbank last weekend.",
        "The weekly farmers' market will move to the square in front of the church from next month.",
        "The local library has extended its opening hours and now also opens on Saturday afternoons.",
        "Residents were invited to a public meeting to discuss the plans for a new cycle path.",
        "The fire brigade was called out twice during the storm to remove fallen trees.",
        "The village celebrated the reopening of its restored bridge with music and a small festival.",
        "A new bus line will connect the outlying districts with the railway station.",
        "The mayor thanked all the clubs and associations for their commitment to the community.",
        "The swimming pool will remain closed this summer because of urgent repairs.",
        "Parents collected signatures for a safer crossing in front of the kindergarten.",
    ],
    "technology": [
        "Regular software updates close security gaps that attackers could otherwise exploit.",
        "A strong password should be long and should never be used for more than one account.",
        "Many small companies now keep their data in the cloud instead of on their own servers.",
        "The new smartphone has a larger battery but is noticeably heavier than its predecessor.",
        "Open source software can be inspected, changed and shared by anyone.",
        "Before buying a new laptop, it is worth thinking about what you really need it for.",
        "Backups are only useful if you regularly check that they can actually be restored.",
        "Electric cars are becoming more popular as the charging network grows.",
        "The school introduced tablets in the classroom and trained its teachers to use them.",
        "Language models are trained on large collections of text and learn to predict the next word.",
        "A slow internet connection is often caused by an old router rather than by the provider.",
        "The city is testing sensors that show drivers where free parking spaces are available.",
    ],
    "history": [
        "The castle was built in the thirteenth century to control the trade route across the pass.",
        "For centuries, the monastery was the most important centre of learning in the region.",
        "The railway reached the valley in 1889 and changed the lives of its inhabitants for ever.",
        "Many families emigrated to America in the nineteenth century because of poverty and hunger.",
        "The old town hall survived a great fire that destroyed most of the houses around it.",
        "Archaeologists found Roman coins and pottery during the construction of the new car park.",
        "The first written mention of the village is found in a document from the year 1150.",
        "During the war, the bridge was of great strategic importance for both sides.",
        "The printing press made books cheaper and helped new ideas spread across Europe.",
        "Women in the country only won the right to vote after a long political struggle.",
        "The museum displays tools and clothes that show how farmers lived two hundred years ago.",
        "The canal was dug by hand and took almost twenty years to complete.",
    ],
    "sport": [
        "The home team won the match two to one thanks to a goal in the last minute.",
        "Thousands of runners took part in the city marathon despite the rain.",
        "Cross-country skiing is one of the most demanding endurance sports.",
        "The young tennis player reached the final of the tournament for the first time.",
        "The cycling race leads over three mountain passes and ends with a steep climb.",
        "Regular exercise improves not only physical fitness but also mood and sleep.",
        "The coach praised the players for their discipline and team spirit.",
        "The new sports hall will be open to schools and clubs from the autumn.",
        "The ice hockey season starts in September and ends with the playoffs in spring.",
        "Swimming is a gentle sport that is suitable for people of all ages.",
        "The local football club is looking for volunteers to train its youth teams.",
        "After a serious injury, the athlete needed almost a year to return to competition.",
    ],
    "nature": [
        "In autumn, the larch trees turn golden yellow before they lose their needles.",
        "The ibex had almost disappeared from the Alps but has returned thanks to protection programmes.",
        "Wetlands store large amounts of water and provide a home for many rare species.",
        "The glacier has lost more than a third of its volume in the last fifty years.",
        "Marmots spend the long winter months asleep in burrows deep underground.",
        "Wild flowers cover the meadows in early summer and attract countless insects.",
        "The river has been given back a more natural course, and the fish have returned.",
        "Birds of prey use warm air currents to glide for hours without flapping their wings.",
        "The forest protects the village below from avalanches and falling rocks.",
        "Hikers are asked to stay on the paths so that they do not disturb the wildlife.",
        "The lake freezes over in particularly cold winters, but the ice is rarely safe to walk on.",
        "Mushrooms play an important role in the forest because they break down dead wood.",
    ],
}

TITLES = {
    "travel": [
        "A weekend in the mountains",
        "Travel tips for the quiet season",
        "By train along the lake",
    ],
    "cooking": [
        "Our favourite winter recipes",
        "Baking bread at home",
        "Simple cooking with seasonal vegetables",
    ],
    "science": [
        "How glaciers are measured",
        "Why ice floats on water",
        "News from astronomy",
    ],
    "local_news": [
        "News from the town council",
        "Road works on the main road",
        "A festival for the new bridge",
    ],
    "technology": [
        "Tips for safer passwords",
        "Is the cloud right for small businesses",
        "The new smartphone put to the test",
    ],
    "history": [
        "The history of our valley",
        "When the railway arrived",
        "Treasures from the town museum",
    ],
    "sport": [
        "Report from the city marathon",
        "A late winner for the home team",
        "Winter sports for beginners",
    ],
    "nature": [
        "Autumn in the larch forest",
        "The return of the ibex",
        "Protecting our wetlands",
    ],
}

# Path segments of the made-up sites, one per topic (ASCII, as in real URLs).
SECTIONS = {
    "travel": "travel",
    "cooking": "recipes",
    "science": "science",
    "local_news": "news",
    "technology": "tech",
    "history": "history",
    "sport": "sport",
    "nature": "nature",
}

TOXIC = [
    "You are a pathetic idiot and nobody wants to read your garbage.",
    "Shut up, you brainless moron, and crawl back under your rock.",
    "Only a complete imbecile would write such worthless trash.",
    "Get lost, you miserable loser, nobody here can stand you.",
    "You disgusting clown, your stupid opinions make me sick.",
    "What a useless piece of garbage you are, go away and never come back.",
    "Nobody cares about you or your pathetic little life, you fool.",
    "Everyone knows you are a lying, spineless coward.",
    "Your brain must be the size of a pea, you clueless idiot.",
    "Stop posting your idiotic nonsense, you annoying little troll.",
    "You are too dumb to understand anything, so keep your filthy mouth shut.",
    "This author is a shameless fraud and a total waste of space.",
]

BOILERPLATE = {
    "cookie": (
        "This website uses cookies to improve your experience. By continuing to browse the site, "
        "you agree to our use of cookies."
    ),
    "cookie_buttons": ["Accept all", "Only necessary cookies", "Settings"],
    "nav": [
        "Home",
        "News",
        "About us",
        "Services",
        "Blog",
        "Shop",
        "Contact",
        "Imprint",
        "Privacy",
        "Login",
    ],
    "read_more": "Read more",
    "related": "Related articles",
    "share": "Share this article",
    "newsletter": "Subscribe to our newsletter",
    "rights": "All rights reserved.",
    "back_to_top": "Back to top",
}

SPAM = [
    "cheap",
    "buy now",
    "best price",
    "discount",
    "free shipping",
    "online shop",
    "sale",
    "order today",
    "shoes",
    "watches",
    "bargain",
    "top deals",
]

PII = {
    "email": "For questions about this article, please write to {email}.",
    "phone": "You can reach our office by phone at {phone_national}, or from abroad at {phone_international}.",
    "ipv4": "During the outage, the server at {ipv4} could not be reached for several hours.",
    "ipv6": "Our website can also be reached over IPv6 at the address {ipv6}.",
    "iban": "Donations to the association can be transferred to the account {iban}.",
}

LOOKALIKES = {
    "version": "Version {version} of the timetable app was released on {date_iso}.",
    "build": "The computers in the library were updated to build {build} on {date_local}.",
    "price": "The printed guide costs {price} and can be ordered with ISBN {isbn}.",
    "address": "The tourist office is open from {time_open} to {time_close} and is located at {postcode} {city}.",
}

FOOTER = "This article was last reviewed by our editorial team."

LOCALE = {
    "country": "GB",
    "mail_names": [
        "james.walker",
        "emma.clarke",
        "info",
        "editor",
        "oliver.bennett",
        "sophie.hughes",
    ],
    "cities": [
        ("SW1A 1AA", "London"),
        ("M1 1AE", "Manchester"),
        ("EH1 1YZ", "Edinburgh"),
        ("CF10 1EP", "Cardiff"),
    ],
    "date_local": "{d:02d}/{m:02d}/{y}",
    "price": "£{units}.{cents:02d}",
    "isbn_group": "1",
}
